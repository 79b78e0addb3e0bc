//! A small XML reader for `nvidia-smi -q -x` output: elements, their text,
//! their attributes, and the line each starts on. It reads what nvidia-smi
//! writes (an XML declaration, a DOCTYPE with or without an internal
//! subset, comments, the five predefined entities and character
//! references) and refuses anything else with the line and the element it
//! was in. No namespaces, no external entities: a capture never has them,
//! and an entity that expands is a way to make a small file huge.

use super::{Node, ParseError, MAX_DEPTH};
use crate::value::Invalid;

struct Reader<'a> {
    text: &'a str,
    pos: usize,
    line: usize,
}

impl<'a> Reader<'a> {
    fn rest(&self) -> &'a str {
        &self.text[self.pos..]
    }

    fn advance(&mut self, n: usize) {
        let n = n.min(self.text.len() - self.pos);
        self.line += self.text[self.pos..self.pos + n].matches('\n').count();
        self.pos += n;
    }

    fn err(&self, element: Option<&str>, message: impl Into<String>) -> ParseError {
        ParseError {
            line: self.line,
            element: element.map(str::to_string),
            message: message.into(),
        }
    }

    /// Skips to just past `end`, or fails naming what was left open.
    fn skip_past(
        &mut self,
        end: &str,
        what: &str,
        element: Option<&str>,
    ) -> Result<(), ParseError> {
        match self.rest().find(end) {
            Some(i) => {
                self.advance(i + end.len());
                Ok(())
            }
            None => Err(self.err(element, format!("{what} is never closed (no `{end}`)"))),
        }
    }

    fn skip_space(&mut self) {
        let n = self.rest().len() - self.rest().trim_start().len();
        self.advance(n);
    }

    /// Comments, processing instructions and the DOCTYPE, between elements.
    fn skip_misc(&mut self, element: Option<&str>) -> Result<bool, ParseError> {
        let rest = self.rest();
        if rest.starts_with("<!--") {
            self.skip_past("-->", "a comment", element)?;
        } else if rest.starts_with("<?") {
            self.skip_past("?>", "a processing instruction", element)?;
        } else if rest.starts_with("<!DOCTYPE") {
            // `<!DOCTYPE nvidia_smi_log SYSTEM "x.dtd">`, or with an internal
            // subset in brackets (which may hold `>` of its own).
            let bytes = rest.as_bytes();
            let mut depth = 0usize;
            let mut end = None;
            for (i, &b) in bytes.iter().enumerate() {
                match b {
                    b'[' => depth += 1,
                    b']' => depth = depth.saturating_sub(1),
                    b'>' if depth == 0 => {
                        end = Some(i);
                        break;
                    }
                    _ => {}
                }
            }
            match end {
                Some(i) => self.advance(i + 1),
                None => return Err(self.err(element, "the DOCTYPE is never closed")),
            }
        } else {
            return Ok(false);
        }
        Ok(true)
    }

    fn name(&mut self, element: Option<&str>) -> Result<String, ParseError> {
        let n: usize = self
            .rest()
            .char_indices()
            .find(|(_, c)| !(c.is_alphanumeric() || matches!(c, '_' | '-' | '.' | ':')))
            .map_or(self.rest().len(), |(i, _)| i);
        if n == 0 {
            let got: String = self.rest().chars().take(12).collect();
            return Err(self.err(element, format!("expected an element name, found `{got}`")));
        }
        let name = self.rest()[..n].to_string();
        self.advance(n);
        Ok(name)
    }

    fn element(&mut self, depth: usize, parent: Option<&str>) -> Result<Node, ParseError> {
        if depth > MAX_DEPTH {
            return Err(self.err(
                parent,
                format!("elements nested more than {MAX_DEPTH} deep"),
            ));
        }
        let line = self.line;
        self.advance(1); // '<'
        let name = self.name(parent)?;
        let mut attrs = Vec::new();
        loop {
            self.skip_space();
            let rest = self.rest();
            if rest.starts_with("/>") {
                self.advance(2);
                return Ok(Node {
                    name,
                    attrs,
                    text: String::new(),
                    children: Vec::new(),
                    line,
                });
            }
            if rest.starts_with('>') {
                self.advance(1);
                break;
            }
            if rest.is_empty() {
                return Err(self.err(
                    Some(&name),
                    format!("the start tag <{name}> is never closed"),
                ));
            }
            let key = self.name(Some(&name))?;
            self.skip_space();
            if !self.rest().starts_with('=') {
                return Err(self.err(Some(&name), format!("attribute `{key}` has no value")));
            }
            self.advance(1);
            self.skip_space();
            let Some(quote @ ('"' | '\'')) = self.rest().chars().next() else {
                return Err(self.err(
                    Some(&name),
                    format!("attribute `{key}`: the value must be quoted"),
                ));
            };
            self.advance(1);
            let Some(end) = self.rest().find(quote) else {
                return Err(self.err(
                    Some(&name),
                    format!("attribute `{key}`: unterminated value"),
                ));
            };
            let raw = &self.rest()[..end];
            let value = unescape(raw).map_err(|m| self.err(Some(&name), m.into_message()))?;
            self.advance(end + 1);
            attrs.push((key, value));
        }
        let mut text = String::new();
        let mut children = Vec::new();
        loop {
            let rest = self.rest();
            let Some(lt) = rest.find('<') else {
                self.advance(rest.len());
                return Err(self.err(
                    Some(&name),
                    format!("<{name}> (line {line}) is never closed: the file ends inside it"),
                ));
            };
            if lt > 0 {
                let chunk = &rest[..lt];
                text.push_str(
                    &unescape(chunk).map_err(|m| self.err(Some(&name), m.into_message()))?,
                );
                self.advance(lt);
                continue;
            }
            if rest.starts_with("</") {
                self.advance(2);
                let close = self.name(Some(&name))?;
                self.skip_space();
                if !self.rest().starts_with('>') {
                    return Err(self.err(Some(&name), format!("</{close} is not closed by `>`")));
                }
                self.advance(1);
                if close != name {
                    return Err(self.err(
                        Some(&name),
                        format!("</{close}> closes <{name}> (opened on line {line})"),
                    ));
                }
                break;
            }
            if rest.starts_with("<![CDATA[") {
                self.advance(9);
                let Some(end) = self.rest().find("]]>") else {
                    return Err(self.err(Some(&name), "a CDATA section is never closed"));
                };
                text.push_str(&self.rest()[..end]);
                self.advance(end + 3);
                continue;
            }
            if self.skip_misc(Some(&name))? {
                continue;
            }
            children.push(self.element(depth + 1, Some(&name))?);
        }
        Ok(Node {
            name,
            attrs,
            text: text.trim().to_string(),
            children,
            line,
        })
    }
}

/// Replaces the predefined entities and character references.
fn unescape(raw: &str) -> Result<String, Invalid> {
    if !raw.contains('&') {
        return Ok(raw.to_string());
    }
    let mut out = String::with_capacity(raw.len());
    let mut rest = raw;
    while let Some(i) = rest.find('&') {
        out.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        let Some(semi) = after.find(';').filter(|&s| s <= 10) else {
            return Err("a `&` that starts no entity (write &amp;)".into());
        };
        let entity = &after[..semi];
        let c = match entity {
            "amp" => '&',
            "lt" => '<',
            "gt" => '>',
            "quot" => '"',
            "apos" => '\'',
            e if e.starts_with("#x") => u32::from_str_radix(&e[2..], 16)
                .ok()
                .and_then(char::from_u32)
                .ok_or_else(|| format!("bad character reference `&{e};`"))?,
            e if e.starts_with('#') => e[1..]
                .parse::<u32>()
                .ok()
                .and_then(char::from_u32)
                .ok_or_else(|| format!("bad character reference `&{e};`"))?,
            e => {
                return Err(Invalid::from(format!(
                    "unknown entity `&{e};` (a capture uses only &amp; &lt; &gt; &quot; &apos;)"
                )))
            }
        };
        out.push(c);
        rest = &after[semi + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

/// Reads an XML document: its root element, with every child.
pub fn parse(text: &str) -> Result<Node, ParseError> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut r = Reader {
        text,
        pos: 0,
        line: 1,
    };
    loop {
        r.skip_space();
        if !r.skip_misc(None)? {
            break;
        }
    }
    if !r.rest().starts_with('<') {
        let got: String = r.rest().chars().take(20).collect();
        let why = if r.pos == 0 {
            ": the file does not start as XML does (its first bytes lost?)"
        } else {
            ""
        };
        return Err(r.err(
            None,
            format!("expected the root element, found `{got}`{why}"),
        ));
    }
    let root = r.element(0, None)?;
    loop {
        r.skip_space();
        if r.rest().is_empty() {
            return Ok(root);
        }
        if !r.skip_misc(None)? {
            return Err(r.err(
                None,
                format!(
                    "text after the end of <{}>: a capture has one root element",
                    root.name
                ),
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_what_nvidia_smi_writes() {
        let text = "<?xml version=\"1.0\" ?>\n<!DOCTYPE nvidia_smi_log SYSTEM \"nvsmi_device_v13.dtd\">\n\
            <nvidia_smi_log>\n\t<driver_version>590.48.01</driver_version>\n\t<gpu id=\"00000000:00:09.0\">\n\
            \t\t<product_name>A &amp; B &#x41;&#66;</product_name>\n\t\t<mig_devices>\n\t\t\tNone\n\t\t</mig_devices>\n\
            \t\t<empty/>\n\t</gpu>\n</nvidia_smi_log>\n";
        let root = parse(text).unwrap();
        assert_eq!(root.name, "nvidia_smi_log");
        assert_eq!(root.line, 3);
        let gpu = root.child("gpu").unwrap();
        assert_eq!(gpu.attr("id"), Some("00000000:00:09.0"));
        assert_eq!(gpu.line, 5);
        assert_eq!(gpu.child("product_name").unwrap().text, "A & B AB");
        assert_eq!(gpu.child("mig_devices").unwrap().text, "None");
        assert!(gpu.child("empty").unwrap().children.is_empty());
    }

    #[test]
    fn an_internal_dtd_subset_and_comments_are_skipped() {
        let text = "<?xml version=\"1.0\"?>\n<!DOCTYPE nvidia_smi_log [\n<!ELEMENT nvidia_smi_log (a)>\n<!ELEMENT a (#PCDATA)>\n]>\n\
            <!-- licensed to the ASF -->\n<nvidia_smi_log><a>1</a><!-- x --></nvidia_smi_log>";
        let root = parse(text).unwrap();
        assert_eq!(root.child("a").unwrap().text, "1");
    }

    #[test]
    fn errors_name_the_line_and_the_element() {
        for (text, line, element, says) in [
            ("<a>\n<b>1</c>\n</a>", 2, Some("b"), "</c> closes <b>"),
            ("<a>\n<b>1</b>\n", 3, Some("a"), "never closed"),
            ("<a>\n<b x=1>1</b></a>", 2, Some("b"), "must be quoted"),
            ("<a>\n\n<b>&nbsp;</b></a>", 3, Some("b"), "unknown entity"),
            ("<a></a>\n<b></b>", 2, None, "one root element"),
            ("hello", 1, None, "expected the root element"),
            ("<a>\n<!-- open", 2, Some("a"), "comment is never closed"),
        ] {
            let e = parse(text).expect_err(text);
            assert_eq!(e.line, line, "{e}: {text}");
            assert_eq!(e.element.as_deref(), element, "{e}: {text}");
            assert!(e.message.contains(says), "{e}: {text}");
        }
    }

    #[test]
    fn deep_nesting_is_refused_not_a_stack_overflow() {
        let text = "<a>".repeat(100_000);
        let e = parse(&text).unwrap_err();
        assert!(e.message.contains("nested more than"), "{e}");
    }
}
