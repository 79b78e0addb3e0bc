//! Log output on stderr: logfmt (`ts=… level=info msg="…" key=value`, what
//! the Prometheus exporters write and what log pipelines parse without a
//! schema) or one JSON object per line.

use std::fmt::{self, Write as _};

use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::time::{FormatTime, SystemTime};
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

use crate::cli::{LogFormat, LogLevel};

impl LogLevel {
    fn as_tracing(self) -> Level {
        match self {
            LogLevel::Debug => Level::DEBUG,
            LogLevel::Info => Level::INFO,
            LogLevel::Warn => Level::WARN,
            LogLevel::Error => Level::ERROR,
        }
    }
}

/// Installs the global subscriber. A second call (tests) leaves the first in
/// place rather than failing.
pub fn init(level: LogLevel, format: LogFormat) {
    let builder = tracing_subscriber::fmt()
        .with_max_level(level.as_tracing())
        .with_writer(std::io::stderr)
        .with_ansi(false);
    let _ = match format {
        LogFormat::Logfmt => builder.event_format(Logfmt).try_init(),
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .with_span_list(false)
            .try_init(),
    };
}

/// One logfmt line per event: `ts`, `level`, `target`, `msg`, then the
/// event's own fields in the order they were written.
pub struct Logfmt;

impl<S, N> FormatEvent<S, N> for Logfmt
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        _ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let mut ts = String::new();
        SystemTime.format_time(&mut Writer::new(&mut ts))?;
        let meta = event.metadata();
        let mut line = format!(
            "ts={ts} level={} target={}",
            meta.level().as_str().to_ascii_lowercase(),
            meta.target()
        );
        let mut visitor = LogfmtVisitor {
            message: None,
            fields: String::new(),
        };
        event.record(&mut visitor);
        if let Some(msg) = visitor.message {
            line.push_str(" msg=");
            push_value(&mut line, &msg);
        }
        line.push_str(&visitor.fields);
        writeln!(writer, "{line}")
    }
}

struct LogfmtVisitor {
    message: Option<String>,
    fields: String,
}

impl LogfmtVisitor {
    fn push(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.message = Some(value.to_string());
        } else {
            self.fields.push(' ');
            self.fields.push_str(field.name());
            self.fields.push('=');
            push_value(&mut self.fields, value);
        }
    }
}

impl Visit for LogfmtVisitor {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.push(field, value);
    }

    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        // Include the causes: "bind 0.0.0.0:9445: address in use" reads
        // better than the outermost message alone.
        let mut s = value.to_string();
        let mut source = value.source();
        while let Some(e) = source {
            let _ = write!(s, ": {e}");
            source = e.source();
        }
        self.push(field, &s);
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.push(field, &format!("{value:?}"));
    }
}

/// Writes a logfmt value, quoted only when it must be.
fn push_value(out: &mut String, value: &str) {
    let needs_quotes = value.is_empty()
        || value
            .chars()
            .any(|c| c == ' ' || c == '=' || c == '"' || c == '\\' || c.is_control());
    if !needs_quotes {
        out.push_str(value);
        return;
    }
    out.push('"');
    for c in value.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() => {
                let _ = write!(out, "\\u{{{:x}}}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    #[derive(Clone, Default)]
    struct Buf(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Buf {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    fn capture(f: impl FnOnce()) -> String {
        let buf = Buf::default();
        let out = buf.clone();
        let sub = tracing_subscriber::fmt()
            .with_writer(move || buf.clone())
            .with_ansi(false)
            .event_format(Logfmt)
            .finish();
        tracing::subscriber::with_default(sub, f);
        let bytes = out.0.lock().unwrap().clone();
        String::from_utf8(bytes).unwrap()
    }

    #[test]
    fn logfmt_line() {
        let out = capture(|| {
            tracing::info!(address = "127.0.0.1:9445", gpus = 8, "listening on it");
        });
        assert!(out.starts_with("ts=20"), "{out}");
        assert!(out.ends_with('\n'));
        let rest = out.split_once(' ').unwrap().1;
        assert_eq!(
            rest,
            "level=info target=nvml_exporter::logging::tests msg=\"listening on it\" \
             address=127.0.0.1:9445 gpus=8\n"
        );
    }

    #[test]
    fn logfmt_quoting() {
        let mut s = String::new();
        push_value(&mut s, "plain");
        assert_eq!(s, "plain");
        for (v, want) in [
            ("", "\"\""),
            ("a b", "\"a b\""),
            ("k=v", "\"k=v\""),
            ("say \"hi\"", "\"say \\\"hi\\\"\""),
            ("two\nlines", "\"two\\nlines\""),
            ("back\\slash", "\"back\\\\slash\""),
        ] {
            let mut s = String::new();
            push_value(&mut s, v);
            assert_eq!(s, want, "{v:?}");
        }
    }

    #[test]
    fn errors_include_their_causes() {
        #[derive(Debug, thiserror::Error)]
        #[error("outer")]
        struct Outer(#[source] std::io::Error);
        let e = Outer(std::io::Error::other("inner"));
        let out = capture(|| {
            tracing::error!(error = &e as &(dyn std::error::Error + 'static), "failed");
        });
        assert!(out.contains("error=\"outer: inner\""), "{out}");
    }
}
