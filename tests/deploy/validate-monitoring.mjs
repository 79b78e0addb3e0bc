// Validates prometheus-operator objects (ServiceMonitor, PrometheusRule)
// given as a JSON array in the file named by argv[2], two ways:
//  1. the JSON schemas of the operator's CRDs, compiled into
//     @kubernetes-models/prometheus-operator (types, required fields,
//     duration patterns);
//  2. TypeScript's excess-property check against the same package's types,
//     because those schemas allow unknown fields and a misspelt key
//     ("intervall") would otherwise pass and be silently dropped by the API
//     server.
// Prints one line per problem and exits 1 if there is any.
import { mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import ts from "typescript";
import { PrometheusRule } from "@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1/PrometheusRule";
import { ServiceMonitor } from "@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1/ServiceMonitor";

const models = {
  ServiceMonitor: { cls: ServiceMonitor, type: "IServiceMonitor" },
  PrometheusRule: { cls: PrometheusRule, type: "IPrometheusRule" },
};

const objects = JSON.parse(readFileSync(process.argv[2], "utf8"));
const problems = [];

objects.forEach((obj, i) => {
  const model = models[obj.kind];
  const where = `${obj.kind ?? "?"}/${obj.metadata?.name ?? i}`;
  if (!model) {
    problems.push(`${where}: no model for kind ${obj.kind}`);
    return;
  }
  try {
    new model.cls(obj).validate();
  } catch (err) {
    problems.push(`${where}: schema: ${err.message}`);
  }
});

const testsDir = join(dirname(fileURLToPath(import.meta.url)), "..");
const work = mkdtempSync(join(tmpdir(), "validate-monitoring-"));
try {
  symlinkSync(join(testsDir, "node_modules"), join(work, "node_modules"));
  const lines = [
    'import type { IServiceMonitor } from "@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1/ServiceMonitor";',
    'import type { IPrometheusRule } from "@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1/PrometheusRule";',
  ];
  objects.forEach((obj, i) => {
    const model = models[obj.kind];
    if (model) lines.push(`export const o${i} = (${JSON.stringify(obj)}) satisfies ${model.type};`);
  });
  const file = join(work, "objects.ts");
  writeFileSync(file, lines.join("\n") + "\n");
  const program = ts.createProgram([file], {
    strict: true,
    noEmit: true,
    target: ts.ScriptTarget.ES2022,
    module: ts.ModuleKind.NodeNext,
    moduleResolution: ts.ModuleResolutionKind.NodeNext,
    skipLibCheck: true,
  });
  for (const d of ts.getPreEmitDiagnostics(program)) {
    const text = ts.flattenDiagnosticMessageText(d.messageText, "\n");
    let where = "";
    if (d.file && d.start !== undefined) {
      const { line } = d.file.getLineAndCharacterOfPosition(d.start);
      const obj = objects[line - 2];
      where = obj ? `${obj.kind}/${obj.metadata?.name}: ` : `line ${line + 1}: `;
    }
    problems.push(`${where}types: ${text}`);
  }
} finally {
  rmSync(work, { recursive: true, force: true });
}

for (const p of problems) console.log(p);
process.exit(problems.length ? 1 : 0);
