//! `nvidia-smi -q` text, read into the element tree `nvidia-smi -q -x`
//! gives the same host, so one reader of values serves both formats.
//!
//! The text is `Label : value` lines and section headers, nested by
//! indentation (four spaces a level), after a `==============NVSMI
//! LOG==============` line. Labels become the XML element names: by a
//! table of the labels whose element is named otherwise (`GPU UUID` is
//! `uuid`, `Tx Throughput` is `tx_util`), else lower-cased with `_` for
//! spaces. A file may hold other output around the log (the
//! nvidia_gpu_exporter captures hold an idle and a loaded `-q`, CSV, `-L`,
//! `topo -m`...): the **first** log is read, up to the next `####` banner
//! or the next log.

use super::{Node, ParseError, MAX_DEPTH};

/// `(parent element, label, element path)`: where a label's element is
/// not the label lower-cased with `_` for spaces. A path with `/` puts the
/// value in nested elements, as the XML does.
const LABELS: &[(&str, &str, &str)] = &[
    ("gpu", "Serial Number", "serial"),
    ("gpu", "GPU UUID", "uuid"),
    ("gpu", "GPU PDI", "pdi"),
    ("gpu", "FRU Part Number", "gpu_fru_part_number"),
    ("gpu", "Module ID", "gpu_module_id"),
    ("gpu", "Platform Info", "platformInfo"),
    ("gpu", "GPU C2C Mode", "c2c_mode"),
    (
        "gpu",
        "Conf Compute Protected Memory Usage",
        "cc_protected_memory_usage",
    ),
    ("gpu", "Ecc Mode", "ecc_mode"),
    ("gpu", "Workload Power Profiles", "power_profiles"),
    ("gpu", "Inforom BBX Object Flush", "inforom_bbx_flush"),
    ("gpu", "Clocks Throttle Reasons", "clocks_throttle_reasons"),
    ("mig_mode", "Current", "current_mig"),
    ("mig_mode", "Pending", "pending_mig"),
    ("driver_model", "Current", "current_dm"),
    ("driver_model", "Pending", "pending_dm"),
    ("gpu_operation_mode", "Current", "current_gom"),
    ("gpu_operation_mode", "Pending", "pending_gom"),
    ("ecc_mode", "Current", "current_ecc"),
    ("ecc_mode", "Pending", "pending_ecc"),
    ("dram_encryption_mode", "Current", "current_dram_encryption"),
    ("dram_encryption_mode", "Pending", "pending_dram_encryption"),
    ("inforom_version", "Image Version", "img_version"),
    ("inforom_version", "Power Management Object", "pwr_object"),
    ("pci", "Bus", "pci_bus"),
    ("pci", "Device", "pci_device"),
    ("pci", "Domain", "pci_domain"),
    ("pci", "Base Classcode", "pci_base_class"),
    ("pci", "Sub Classcode", "pci_sub_class"),
    ("pci", "Device Id", "pci_device_id"),
    ("pci", "Bus Id", "pci_bus_id"),
    ("pci", "Sub System Id", "pci_sub_system_id"),
    ("pci", "GPU Link Info", "pci_gpu_link_info"),
    ("pci", "Bridge Chip", "pci_bridge_chip"),
    ("pci", "Replays Since Reset", "replay_counter"),
    ("pci", "Replay Number Rollovers", "replay_rollover_counter"),
    ("pci", "Tx Throughput", "tx_util"),
    ("pci", "Rx Throughput", "rx_util"),
    ("pci_gpu_link_info", "PCIe Generation", "pcie_gen"),
    ("pci_gpu_link_info", "Link Width", "link_widths"),
    ("pcie_gen", "Max", "max_link_gen"),
    ("pcie_gen", "Current", "current_link_gen"),
    ("pcie_gen", "Device Current", "device_current_link_gen"),
    ("pcie_gen", "Device Max", "max_device_link_gen"),
    ("pcie_gen", "Host Max", "max_host_link_gen"),
    ("link_widths", "Max", "max_link_width"),
    ("link_widths", "Current", "current_link_width"),
    ("pci_bridge_chip", "Type", "bridge_chip_type"),
    ("pci_bridge_chip", "Firmware", "bridge_chip_fw"),
    (
        "clocks_event_reasons_counters",
        "SW Power Capping",
        "clocks_event_reasons_counters_sw_power_cap",
    ),
    (
        "clocks_event_reasons_counters",
        "Sync Boost",
        "clocks_event_reasons_counters_sync_boost",
    ),
    (
        "clocks_event_reasons_counters",
        "SW Thermal Slowdown",
        "clocks_event_reasons_counters_sw_therm_slowdown",
    ),
    (
        "clocks_event_reasons_counters",
        "HW Thermal Slowdown",
        "clocks_event_reasons_counters_hw_therm_slowdown",
    ),
    (
        "clocks_event_reasons_counters",
        "HW Power Braking",
        "clocks_event_reasons_counters_hw_power_brake",
    ),
    ("utilization", "GPU", "gpu_util"),
    ("utilization", "Gpu", "gpu_util"),
    ("utilization", "Memory", "memory_util"),
    ("utilization", "Encoder", "encoder_util"),
    ("utilization", "Decoder", "decoder_util"),
    ("utilization", "JPEG", "jpeg_util"),
    ("utilization", "OFA", "ofa_util"),
    ("encoder_stats", "Active Sessions", "session_count"),
    ("fbc_stats", "Active Sessions", "session_count"),
    (
        "ecc_errors",
        "SRAM Uncorrectable SEC-DED",
        "sram_uncorrectable_secded",
    ),
    (
        "volatile",
        "SRAM Uncorrectable SEC-DED",
        "sram_uncorrectable_secded",
    ),
    (
        "aggregate",
        "SRAM Uncorrectable SEC-DED",
        "sram_uncorrectable_secded",
    ),
    ("single_bit", "Texture Shared", "texture_shm"),
    ("double_bit", "Texture Shared", "texture_shm"),
    (
        "retired_pages",
        "Single Bit ECC",
        "multiple_single_bit_retirement/retired_count",
    ),
    (
        "retired_pages",
        "Double Bit ECC",
        "double_bit_retirement/retired_count",
    ),
    (
        "retired_pages",
        "Pending Page Blacklist",
        "pending_blacklist",
    ),
    (
        "retired_pages",
        "Pending Page Retirement",
        "pending_retirement",
    ),
    ("remapped_rows", "Correctable Error", "remapped_row_corr"),
    ("remapped_rows", "Uncorrectable Error", "remapped_row_unc"),
    (
        "remapped_rows",
        "Inactive Correctable Error",
        "remapped_row_corr_inactive",
    ),
    (
        "remapped_rows",
        "Inactive Uncorrectable Error",
        "remapped_row_unc_inactive",
    ),
    ("remapped_rows", "Pending", "remapped_row_pending"),
    (
        "remapped_rows",
        "Remapping Failure Occurred",
        "remapped_row_failure",
    ),
    (
        "remapped_rows",
        "Bank Remap Availability Histogram",
        "row_remapper_histogram",
    ),
    (
        "row_remapper_histogram",
        "Max",
        "row_remapper_histogram_max",
    ),
    (
        "row_remapper_histogram",
        "High",
        "row_remapper_histogram_high",
    ),
    (
        "row_remapper_histogram",
        "Partial",
        "row_remapper_histogram_partial",
    ),
    (
        "row_remapper_histogram",
        "Low",
        "row_remapper_histogram_low",
    ),
    (
        "row_remapper_histogram",
        "None",
        "row_remapper_histogram_none",
    ),
    ("temperature", "GPU Current Temp", "gpu_temp"),
    ("temperature", "GPU T.Limit Temp", "gpu_temp_tlimit"),
    ("temperature", "GPU Current T.Limit Temp", "gpu_temp_tlimit"),
    (
        "temperature",
        "GPU Shutdown T.Limit Temp",
        "gpu_temp_max_tlimit_threshold",
    ),
    (
        "temperature",
        "GPU Slowdown T.Limit Temp",
        "gpu_temp_slow_tlimit_threshold",
    ),
    (
        "temperature",
        "GPU Max Operating T.Limit Temp",
        "gpu_temp_max_gpu_tlimit_threshold",
    ),
    (
        "temperature",
        "Memory Max Operating T.Limit Temp",
        "gpu_temp_max_mem_tlimit_threshold",
    ),
    ("temperature", "GPU Shutdown Temp", "gpu_temp_max_threshold"),
    (
        "temperature",
        "GPU Slowdown Temp",
        "gpu_temp_slow_threshold",
    ),
    (
        "temperature",
        "GPU Max Operating Temp",
        "gpu_temp_max_gpu_threshold",
    ),
    (
        "temperature",
        "Memory Max Operating Temp",
        "gpu_temp_max_mem_threshold",
    ),
    ("temperature", "Memory Current Temp", "memory_temp"),
    (
        "gpu_power_readings",
        "Instantaneous Power Draw",
        "instant_power_draw",
    ),
    (
        "gpu_memory_power_readings",
        "Instantaneous Power Draw",
        "instant_power_draw",
    ),
    (
        "module_power_readings",
        "Instantaneous Power Draw",
        "instant_power_draw",
    ),
    ("clocks", "Graphics", "graphics_clock"),
    ("clocks", "SM", "sm_clock"),
    ("clocks", "Memory", "mem_clock"),
    ("clocks", "Video", "video_clock"),
    ("applications_clocks", "Graphics", "graphics_clock"),
    ("applications_clocks", "Memory", "mem_clock"),
    ("default_applications_clocks", "Graphics", "graphics_clock"),
    ("default_applications_clocks", "Memory", "mem_clock"),
    ("deferred_clocks", "Memory", "mem_clock"),
    ("max_clocks", "Graphics", "graphics_clock"),
    ("max_clocks", "SM", "sm_clock"),
    ("max_clocks", "Memory", "mem_clock"),
    ("max_clocks", "Video", "video_clock"),
    ("max_customer_boost_clocks", "Graphics", "graphics_clock"),
    ("voltage", "Graphics", "graphics_volt"),
    ("fabric", "CliqueId", "cliqueId"),
    ("fabric", "ClusterUUID", "clusterUuid"),
    (
        "power_profiles",
        "Requested Profiles",
        "power_profile_requested_profiles",
    ),
    (
        "power_profiles",
        "Enforced Profiles",
        "power_profile_enforced_profiles",
    ),
    ("mig_device", "ECC Errors", "ecc_error_count"),
    ("ecc_error_count", "Volatile", "volatile_count"),
    ("mig_device", "Shared FB Memory Usage", "fb_memory_usage"),
    ("mig_device", "Shared BAR1 Memory", "bar1_memory_usage"),
    ("process_info", "Process ID", "pid"),
    ("process_info", "GPU instance ID", "gpu_instance_id"),
    ("process_info", "Compute instance ID", "compute_instance_id"),
    ("process_info", "Name", "process_name"),
    ("process_info", "Used GPU Memory", "used_memory"),
];

/// The clock-event (throttle) reasons: label, element suffix.
const REASONS: &[(&str, &str)] = &[
    ("Idle", "gpu_idle"),
    ("Applications Clocks Setting", "applications_clocks_setting"),
    ("SW Power Cap", "sw_power_cap"),
    ("HW Slowdown", "hw_slowdown"),
    ("HW Thermal Slowdown", "hw_thermal_slowdown"),
    ("HW Power Brake Slowdown", "hw_power_brake_slowdown"),
    ("Sync Boost", "sync_boost"),
    ("SW Thermal Slowdown", "sw_thermal_slowdown"),
    ("Display Clock Setting", "display_clocks_setting"),
    ("Unknown", "unknown"),
];

/// A label lower-cased, runs of other characters as one `_`.
fn slug(label: &str) -> String {
    let mut out = String::new();
    for c in label.chars() {
        if c.is_ascii_alphanumeric() {
            out.push(c.to_ascii_lowercase());
        } else if !out.ends_with('_') {
            out.push('_');
        }
    }
    out.trim_matches('_').to_string()
}

fn element_path(parent: &str, label: &str) -> String {
    if let Some((_, _, path)) = LABELS.iter().find(|(p, l, _)| *p == parent && *l == label) {
        return (*path).to_string();
    }
    if let Some(prefix) = match parent {
        "clocks_event_reasons" => Some("clocks_event_reason_"),
        "clocks_throttle_reasons" => Some("clocks_throttle_reason_"),
        _ => None,
    } {
        if let Some((_, suffix)) = REASONS.iter().find(|(l, _)| *l == label) {
            return format!("{prefix}{suffix}");
        }
    }
    slug(label)
}

/// One line of the log: its label, value (none for a section header),
/// line number and the lines indented below it.
struct Line {
    label: String,
    value: Option<String>,
    number: usize,
    indent: usize,
    children: Vec<Line>,
}

fn split(content: &str) -> (String, Option<String>) {
    if let Some(i) = content.find(" : ") {
        return (
            content[..i].trim().to_string(),
            Some(content[i + 3..].trim().to_string()),
        );
    }
    let t = content.trim_end();
    if let Some(label) = t.strip_suffix(':') {
        return (label.trim().to_string(), Some(String::new()));
    }
    (t.trim().to_string(), None)
}

/// Nests lines by indentation, at most `MAX_DEPTH` deep (what nests
/// deeper is refused: the converter recurses once per level).
fn nest(lines: Vec<Line>) -> Result<Vec<Line>, ParseError> {
    let mut stack: Vec<Line> = Vec::new();
    let mut top = Vec::new();
    for l in lines {
        while stack.last().is_some_and(|s| s.indent >= l.indent) {
            let done = stack.pop().expect("checked");
            match stack.last_mut() {
                Some(p) => p.children.push(done),
                None => top.push(done),
            }
        }
        if stack.len() >= MAX_DEPTH {
            return Err(ParseError {
                line: l.number,
                element: Some(slug(&l.label)),
                message: format!("lines indented more than {MAX_DEPTH} levels deep"),
            });
        }
        stack.push(l);
    }
    while let Some(done) = stack.pop() {
        match stack.last_mut() {
            Some(p) => p.children.push(done),
            None => top.push(done),
        }
    }
    Ok(top)
}

fn leaf(name: &str, text: &str, line: usize) -> Node {
    Node {
        name: name.to_string(),
        attrs: Vec::new(),
        text: text.to_string(),
        children: Vec::new(),
        line,
    }
}

/// Puts `node` at `path` (`a/b/c`) below `parent`, creating or reusing
/// the intermediate elements.
fn insert(parent: &mut Node, path: &str, mut node: Node) {
    match path.split_once('/') {
        None => {
            node.name = path.to_string();
            parent.children.push(node);
        }
        Some((first, rest)) => {
            let at = match parent.children.iter().position(|c| c.name == first) {
                Some(i) => i,
                None => {
                    parent.children.push(leaf(first, "", node.line));
                    parent.children.len() - 1
                }
            };
            insert(&mut parent.children[at], rest, node);
        }
    }
}

/// Converts the lines below `parent` (an element) into its children.
fn convert(parent: &mut Node, lines: Vec<Line>) {
    for l in lines {
        let path = element_path(&parent.name, &l.label);
        let name = path.rsplit('/').next().unwrap_or(&path).to_string();
        match name.as_str() {
            // One `MIG Device` section per MIG device; the XML groups them.
            "mig_device" => {
                let mut dev = leaf("mig_device", "", l.number);
                convert(&mut dev, l.children);
                let at = match parent.children.iter().position(|c| c.name == "mig_devices") {
                    Some(i) => i,
                    None => {
                        parent.children.push(leaf("mig_devices", "", l.number));
                        parent.children.len() - 1
                    }
                };
                parent.children[at].children.push(dev);
                continue;
            }
            // A flat list: each process starts at its `GPU instance ID`
            // (or at its `Process ID` where the driver prints no ids).
            "processes" => {
                let mut list = leaf("processes", l.value.as_deref().unwrap_or(""), l.number);
                let mut current: Option<Node> = None;
                for item in l.children {
                    let field = element_path("process_info", &item.label);
                    let starts = match current.as_ref() {
                        None => true,
                        Some(c) => {
                            field == "gpu_instance_id"
                                || (field == "pid" && c.child("pid").is_some())
                        }
                    };
                    if starts {
                        list.children.extend(current.take());
                        current = Some(leaf("process_info", "", item.number));
                    }
                    let p = current.as_mut().expect("set above");
                    convert(p, vec![item]);
                }
                list.children.extend(current);
                parent.children.push(list);
                continue;
            }
            _ => {}
        }
        let mut node = leaf(&name, l.value.as_deref().unwrap_or(""), l.number);
        if l.value.is_some() {
            // A value with lines below it (`HW Slowdown : Active` above
            // `HW Thermal Slowdown`, `Process ID : 42` above its `Name`):
            // in the XML those are its siblings.
            insert(parent, &path, node);
            let kids = l.children;
            convert(parent, kids);
        } else {
            convert(&mut node, l.children);
            insert(parent, &path, node);
        }
    }
}

/// The banner that starts a log.
const BANNER: &str = "NVSMI LOG";

/// Whether `text` holds an `nvidia-smi -q` log.
pub fn looks_like(text: &str) -> bool {
    text.lines()
        .any(|l| l.trim_start().starts_with("====") && l.contains(BANNER))
}

/// Reads the first `nvidia-smi -q` log in `text` into an `nvidia_smi_log`
/// element tree.
pub fn parse(text: &str) -> Result<Node, ParseError> {
    let all: Vec<&str> = text.lines().collect();
    let start = all
        .iter()
        .position(|l| l.trim_start().starts_with("====") && l.contains(BANNER))
        .ok_or_else(|| ParseError {
            line: 1,
            element: None,
            message:
                "no `==============NVSMI LOG==============` line: not an `nvidia-smi -q` capture"
                    .into(),
        })?;
    let mut lines = Vec::new();
    for (i, raw) in all.iter().enumerate().skip(start + 1) {
        if raw.starts_with("####") || (raw.contains(BANNER) && raw.trim_start().starts_with("===="))
        {
            break;
        }
        if raw.trim().is_empty() {
            continue;
        }
        let expanded = raw.replace('\t', "    ");
        let indent = expanded.len() - expanded.trim_start().len();
        let (label, value) = split(expanded.trim_start());
        lines.push(Line {
            label,
            value,
            number: i + 1,
            indent,
            children: Vec::new(),
        });
    }
    let mut root = leaf("nvidia_smi_log", "", start + 1);
    for top in nest(lines)? {
        // `GPU 00000000:18:00.0`: a GPU's section, named by its bus id.
        if top.value.is_none() {
            if let Some(bus) = top.label.strip_prefix("GPU ") {
                let mut gpu = leaf("gpu", "", top.number);
                gpu.attrs.push(("id".into(), bus.trim().to_string()));
                convert(&mut gpu, top.children);
                root.children.push(gpu);
                continue;
            }
            if top.indent > 0 || top.children.is_empty() {
                return Err(ParseError {
                    line: top.number,
                    element: Some(slug(&top.label)),
                    message: format!(
                        "`{}` is neither `Label : value` nor a section: not an `nvidia-smi -q` line",
                        top.label
                    ),
                });
            }
        }
        convert(&mut root, vec![top]);
    }
    if root.children.iter().all(|c| c.name != "gpu") {
        return Err(ParseError {
            line: start + 1,
            element: Some("nvidia_smi_log".into()),
            message: "the log has no `GPU <bus id>` section".into(),
        });
    }
    // `nvidia-smi -q` prints `Processes` for every GPU, last or next to
    // last (every capture of tests/corpus, R352 to R610): a GPU without it
    // was cut short, as XML is refused when an element is never closed.
    for gpu in root.children.iter().filter(|c| c.name == "gpu") {
        if gpu.child("processes").is_none() {
            return Err(ParseError {
                line: last_line(gpu),
                element: Some("gpu".into()),
                message: format!(
                    "the section of GPU {} (line {}) ends here without `Processes`, which `nvidia-smi -q` prints for every GPU: the capture is cut short (or a `-q -d` subset)",
                    gpu.attr("id").unwrap_or("?"),
                    gpu.line
                ),
            });
        }
    }
    Ok(root)
}

/// The last line an element or any element below it is on.
fn last_line(node: &Node) -> usize {
    node.children
        .iter()
        .map(last_line)
        .max()
        .unwrap_or(0)
        .max(node.line)
}

#[cfg(test)]
mod tests {
    use super::*;

    const LOG: &str = "
==============NVSMI LOG==============

Timestamp                                              : Tue Jul 14 09:00:27 2026
Driver Version                                         : 590.48.01

Attached GPUs                                          : 1
GPU 00000000:00:09.0
    Product Name                                       : NVIDIA H100 80GB HBM3
    MIG Device
        Index                                          : 0
        GPU Instance ID                                : 2
        Shared FB Memory Usage
            Total                                      : 40448 MiB
    MIG Device
        Index                                          : 1
        GPU Instance ID                                : 3
    PCI
        Bus Id                                         : 00000000:00:09.0
        GPU Link Info
            PCIe Generation
                Max                                    : 5
    Clocks Event Reasons
        Idle                                           : Active
        HW Slowdown                                    : Not Active
            HW Thermal Slowdown                        : Not Active
    Retired Pages
        Single Bit ECC                                 : 2
    Processes
        GPU instance ID                                : 2
        Compute instance ID                            : 1
        Process ID                                     : 4100
            Type                                       : C
            Name                                       : train
            Used GPU Memory                            : 1000 MiB
        GPU instance ID                                : 3
        Compute instance ID                            : 0
        Process ID                                     : 4101
            Type                                       : C+G
            Name                                       : viz
            Used GPU Memory                            : 10 MiB

################################################################################
# loaded
==============NVSMI LOG==============
";

    #[test]
    fn labels_become_the_xml_elements() {
        let root = parse(LOG).unwrap();
        assert_eq!(root.child("driver_version").unwrap().text, "590.48.01");
        let gpu = root.child("gpu").unwrap();
        assert_eq!(gpu.attr("id"), Some("00000000:00:09.0"));
        assert_eq!(gpu.line, 8);
        let p = |path: &str| gpu.path(path).map(|n| n.text.as_str());
        assert_eq!(p("product_name"), Some("NVIDIA H100 80GB HBM3"));
        assert_eq!(p("pci/pci_bus_id"), Some("00000000:00:09.0"));
        assert_eq!(p("pci/pci_gpu_link_info/pcie_gen/max_link_gen"), Some("5"));
        assert_eq!(
            p("clocks_event_reasons/clocks_event_reason_hw_thermal_slowdown"),
            Some("Not Active")
        );
        assert_eq!(
            p("retired_pages/multiple_single_bit_retirement/retired_count"),
            Some("2")
        );
        let migs = gpu.child("mig_devices").unwrap();
        assert_eq!(migs.children.len(), 2);
        assert_eq!(
            migs.children[0].path("fb_memory_usage/total").unwrap().text,
            "40448 MiB"
        );
        let procs: Vec<&Node> = gpu.child("processes").unwrap().children.iter().collect();
        assert_eq!(procs.len(), 2);
        assert_eq!(procs[1].child("pid").unwrap().text, "4101");
        assert_eq!(procs[1].child("type").unwrap().text, "C+G");
        assert_eq!(procs[0].child("compute_instance_id").unwrap().text, "1");
        assert_eq!(procs[0].child("used_memory").unwrap().line, 35);
    }

    #[test]
    fn deep_indentation_is_refused_not_a_stack_overflow() {
        let mut text =
            String::from("==============NVSMI LOG==============\n\nGPU 00000000:00:09.0\n");
        for depth in 1..=200 {
            text.push_str(&"\t".repeat(depth));
            text.push_str("Section\n");
        }
        let e = parse(&text).unwrap_err();
        assert!(e.message.contains("indented more than 64 levels"), "{e}");
        assert_eq!(e.line, 3 + 64, "the first line too deep: {e}");
    }

    #[test]
    fn not_a_log() {
        let e = parse("hello\nworld\n").unwrap_err();
        assert!(e.message.contains("NVSMI LOG"), "{e}");
        let e = parse("==============NVSMI LOG==============\nDriver Version : 1\n").unwrap_err();
        assert!(e.message.contains("no `GPU <bus id>` section"), "{e}");
    }
}
