//! Reading a capture or scenario file: bounded, and decoded from what
//! nvidia-smi's output is saved as. Windows PowerShell 5.1's `>` writes
//! UTF-16 (little endian) with a byte order mark, Notepad UTF-8 with one;
//! both are read, as plain UTF-8 is. What is neither a capture nor a
//! scenario is named for what it looks like.

use crate::value::Invalid;
use std::io::Read;
use std::path::Path;

/// Captures larger than this are refused unread (the largest public one,
/// 8 x B200 in DTD v13, is 357 KB).
pub const MAX_CAPTURE_BYTES: u64 = 16 << 20;

/// What a path is, where it is not a regular file.
fn kind(meta: &std::fs::Metadata) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    let t = meta.file_type();
    if t.is_dir() {
        "a directory"
    } else if t.is_fifo() {
        "a FIFO"
    } else if t.is_char_device() {
        "a character device"
    } else if t.is_block_device() {
        "a block device"
    } else if t.is_socket() {
        "a socket"
    } else {
        "not a regular file"
    }
}

/// Reads `path` (at most [`MAX_CAPTURE_BYTES`]) as text. `regular_only`:
/// refuse anything but a regular file before opening it, as a library
/// inside another process must (a FIFO with no writer would block it for
/// good, a device would never end); otherwise pipes and process
/// substitutions are read too, still bounded.
pub fn read(path: &Path, regular_only: bool) -> Result<String, Invalid> {
    let meta = std::fs::metadata(path).map_err(|e| e.to_string())?;
    if meta.is_dir() || (regular_only && !meta.is_file()) {
        return Err(Invalid::from(format!(
            "not a regular file ({}): save the capture or scenario to a file first",
            kind(&meta)
        )));
    }
    if meta.is_file() && meta.len() > MAX_CAPTURE_BYTES {
        return Err(Invalid::from(too_large()));
    }
    let mut bytes = Vec::new();
    std::fs::File::open(path)
        .and_then(|f| f.take(MAX_CAPTURE_BYTES + 1).read_to_end(&mut bytes))
        .map_err(|e| e.to_string())?;
    if bytes.len() as u64 > MAX_CAPTURE_BYTES {
        return Err(Invalid::from(too_large()));
    }
    decode(&bytes)
}

fn too_large() -> String {
    format!(
        "larger than {MAX_CAPTURE_BYTES} bytes: not a capture (the largest public one is 357 KB) nor a scenario"
    )
}

/// Text from bytes: UTF-8 (a byte order mark dropped), or UTF-16 little
/// or big endian after its byte order mark.
pub fn decode(bytes: &[u8]) -> Result<String, Invalid> {
    let utf16 = |rest: &[u8], little: bool| -> Result<String, Invalid> {
        if !rest.len().is_multiple_of(2) {
            return Err(Invalid::from(format!(
                "UTF-16 text of an odd number of bytes ({}): cut short?",
                rest.len() + 2
            )));
        }
        let units = rest.chunks_exact(2).map(|c| {
            if little {
                u16::from_le_bytes([c[0], c[1]])
            } else {
                u16::from_be_bytes([c[0], c[1]])
            }
        });
        let mut out = String::with_capacity(rest.len() / 2);
        for (i, c) in char::decode_utf16(units).enumerate() {
            out.push(c.map_err(|_| {
                format!(
                    "not UTF-16 text (an unpaired surrogate at byte {})",
                    2 + 2 * i
                )
            })?);
        }
        Ok(out)
    };
    match bytes {
        [0xEF, 0xBB, 0xBF, rest @ ..] => utf8(rest, 3),
        [0xFF, 0xFE, rest @ ..] => utf16(rest, true),
        [0xFE, 0xFF, rest @ ..] => utf16(rest, false),
        _ => utf8(bytes, 0),
    }
}

fn utf8(bytes: &[u8], offset: usize) -> Result<String, Invalid> {
    String::from_utf8(bytes.to_vec()).map_err(|e| {
        let at = e.utf8_error().valid_up_to();
        // UTF-16 saved without its byte order mark: every other byte 0.
        let zeros = bytes.iter().take(200).filter(|&&b| b == 0).count();
        let hint = if zeros * 3 > bytes.len().min(200) {
            " (it looks like UTF-16 without a byte order mark: save it as UTF-8, or with `Out-File -Encoding utf8` in PowerShell)"
        } else {
            ""
        };
        format!("not UTF-8 text (byte {}){hint}", at + offset).into()
    })
}

/// What `text`, neither a scenario nor a capture, looks like: for the
/// message that refuses it.
pub fn looks_like(text: &str) -> &'static str {
    let head = text.trim_start();
    let first = head.lines().next().unwrap_or("");
    if head.is_empty() {
        "an empty file"
    } else if text
        .chars()
        .take(4096)
        .any(|c| c == '\0' || (c.is_control() && !c.is_whitespace()))
    {
        "binary data"
    } else if text.contains("NVIDIA-SMI") && text.contains("+-----") {
        "the table `nvidia-smi` prints without -q (save `nvidia-smi -q -x` or `-q` instead)"
    } else if first.contains(", ")
        && (first.contains("name") || first.contains("uuid") || first.contains("index"))
    {
        "`nvidia-smi --query-gpu` CSV (save `nvidia-smi -q -x` or `-q` instead)"
    } else if head.starts_with('{') || (head.starts_with('[') && first.trim_end().ends_with('[')) {
        "JSON"
    } else if head.starts_with('<') {
        "XML, but not `nvidia-smi -q -x` output (it has no <nvidia_smi_log>)"
    } else {
        "text of another kind"
    }
}

/// Whether `text` reads as TOML at all (a key or a table on its first
/// line that is not a comment): its errors are then a scenario's.
pub fn looks_like_toml(text: &str) -> bool {
    let Some(first) = text
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty() && !l.starts_with('#'))
    else {
        // Only comments: an empty scenario, which TOML reads.
        return true;
    };
    if first.starts_with('[') {
        return first.ends_with(']') && !first.starts_with("[{");
    }
    first.split_once('=').is_some_and(|(key, _)| {
        let key = key.trim();
        !key.is_empty()
            && key
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | '"' | ' '))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utf16_and_boms_read_as_utf8_does() {
        let text = "<nvidia_smi_log>\r\n\u{e9}\u{1F600}</nvidia_smi_log>\r\n";
        let mut le = vec![0xFF, 0xFE];
        let mut be = vec![0xFE, 0xFF];
        for u in text.encode_utf16() {
            le.extend(u.to_le_bytes());
            be.extend(u.to_be_bytes());
        }
        assert_eq!(decode(&le).unwrap(), text);
        assert_eq!(decode(&be).unwrap(), text);
        let mut bom = vec![0xEF, 0xBB, 0xBF];
        bom.extend(text.as_bytes());
        assert_eq!(decode(&bom).unwrap(), text);
        assert!(decode(&le[..le.len() - 1]).unwrap_err().contains("odd"));
        let no_bom: Vec<u8> = text.encode_utf16().flat_map(u16::to_le_bytes).collect();
        let e = decode(&[&no_bom[..], &[0xFF]].concat()).unwrap_err();
        assert!(e.contains("UTF-16 without a byte order mark"), "{e}");
        assert!(decode(b"caf\xe9").unwrap_err().contains("byte 3"));
    }

    #[test]
    fn what_a_file_looks_like() {
        assert!(looks_like_toml("# x\nname = \"a\"\n"));
        assert!(looks_like_toml("[[gpu]]\nmodel = \"h100\"\n"));
        assert!(!looks_like_toml(
            "?xml version=\"1.0\" ?>\n<nvidia_smi_log>"
        ));
        assert!(!looks_like_toml("uuid, name, index\nGPU-1, A, 0\n"));
        assert!(looks_like("uuid, name, index\nGPU-1, A, 0\n").contains("--query-gpu"));
        assert!(looks_like("<html></html>").contains("XML"));
        assert!(looks_like("| NVIDIA-SMI 550 |\n+-----+\n").contains("without -q"));
        assert_eq!(looks_like("\u{0}\u{1}"), "binary data");
    }
}
