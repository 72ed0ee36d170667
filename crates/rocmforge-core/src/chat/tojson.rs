//! The `tojson` filter as Hugging Face transformers defines it for chat
//! templates: Python's `json.dumps(x, ensure_ascii=False, indent=indent,
//! separators=separators, sort_keys=sort_keys)`.
//!
//! minijinja's own `tojson` is Jinja's HTML-safe one: it escapes `<`, `>`,
//! `&` and `'` and writes compact separators, so a tool schema would reach
//! the model as different text than it was trained on. This writes what
//! Python writes: `", "` and `": "` between items (`","` when indenting),
//! non-ASCII characters as they are, floats as Python's `repr`.

use std::fmt::Write;

use minijinja::value::{Kwargs, ValueKind};
use minijinja::{Error, ErrorKind, Value};

/// The filter: `x | tojson`, `x | tojson(indent=2)`, `x | tojson(sort_keys=true)`,
/// `x | tojson(separators=(',', ':'))`.
pub(super) fn tojson(value: &Value, kwargs: Kwargs) -> Result<Value, Error> {
    let indent: Option<Value> = kwargs.get("indent")?;
    let separators: Option<Value> = kwargs.get("separators")?;
    let sort_keys: Option<bool> = kwargs.get("sort_keys")?;
    // Accepted for the signature's sake: output is never ASCII-escaped, as
    // transformers' default.
    let _: Option<bool> = kwargs.get("ensure_ascii")?;
    kwargs.assert_all_used()?;
    let indent = match indent {
        None => None,
        Some(v) if v.is_none() => None,
        Some(v) => match v.as_usize() {
            Some(n) => Some(" ".repeat(n)),
            None => match v.as_str() {
                Some(s) => Some(s.to_owned()),
                None => return Err(bad("tojson: indent must be a number or a string")),
            },
        },
    };
    let (item_sep, key_sep) = match separators {
        Some(v) if !v.is_none() => {
            let parts: Vec<Value> = v.try_iter()?.collect();
            match parts.as_slice() {
                [a, b] if a.as_str().is_some() && b.as_str().is_some() => {
                    (a.to_string(), b.to_string())
                }
                _ => return Err(bad("tojson: separators must be two strings")),
            }
        }
        // Python drops the space after the comma when indenting, since a
        // newline follows.
        _ if indent.is_some() => (",".to_owned(), ": ".to_owned()),
        _ => (", ".to_owned(), ": ".to_owned()),
    };
    let style = Style {
        indent,
        item_sep,
        key_sep,
        sort_keys: sort_keys.unwrap_or(false),
    };
    let mut out = String::new();
    style.write(&mut out, value, 0)?;
    Ok(Value::from(out))
}

fn bad(msg: &'static str) -> Error {
    Error::new(ErrorKind::InvalidOperation, msg)
}

struct Style {
    indent: Option<String>,
    item_sep: String,
    key_sep: String,
    sort_keys: bool,
}

impl Style {
    fn write(&self, out: &mut String, value: &Value, depth: usize) -> Result<(), Error> {
        match value.kind() {
            ValueKind::Undefined | ValueKind::None => out.push_str("null"),
            ValueKind::Bool => out.push_str(if value.is_true() { "true" } else { "false" }),
            ValueKind::Number if value.is_integer() => {
                let _ = write!(out, "{value}");
            }
            ValueKind::Number => {
                let f = f64::try_from(value.clone())?;
                out.push_str(&python_float(f));
            }
            ValueKind::String => write_string(out, value.as_str().unwrap_or_default()),
            ValueKind::Seq | ValueKind::Iterable => {
                let items: Vec<Value> = value.try_iter()?.collect();
                self.write_container(out, '[', ']', items.len(), depth, |out, i| {
                    self.write(out, &items[i], depth + 1)
                })?;
            }
            ValueKind::Map => {
                let mut keys: Vec<Value> = value.try_iter()?.collect();
                if self.sort_keys {
                    keys.sort();
                }
                self.write_container(out, '{', '}', keys.len(), depth, |out, i| {
                    let key = &keys[i];
                    match key.as_str() {
                        Some(s) => write_string(out, s),
                        // Python turns number and boolean keys into strings.
                        None => write_string(out, &self.key_text(key)?),
                    }
                    out.push_str(&self.key_sep);
                    self.write(out, &value.get_item(key)?, depth + 1)
                })?;
            }
            kind => {
                return Err(Error::new(
                    ErrorKind::InvalidOperation,
                    format!("tojson: a {kind} value is not JSON serializable"),
                ))
            }
        }
        Ok(())
    }

    fn key_text(&self, key: &Value) -> Result<String, Error> {
        let mut s = String::new();
        self.write(&mut s, key, 0)?;
        Ok(s)
    }

    /// Brackets around `n` items, each written by `item`, laid out as
    /// `json.dumps` lays them out: on one line, or one per line indented
    /// by depth when `indent` is set (an empty container stays `[]`).
    fn write_container(
        &self,
        out: &mut String,
        open: char,
        close: char,
        n: usize,
        depth: usize,
        mut item: impl FnMut(&mut String, usize) -> Result<(), Error>,
    ) -> Result<(), Error> {
        out.push(open);
        if n == 0 {
            out.push(close);
            return Ok(());
        }
        let newline = |out: &mut String, level: usize| {
            if let Some(unit) = &self.indent {
                out.push('\n');
                for _ in 0..level {
                    out.push_str(unit);
                }
            }
        };
        for i in 0..n {
            if i > 0 {
                out.push_str(&self.item_sep);
            }
            newline(out, depth + 1);
            item(out, i)?;
        }
        newline(out, depth);
        out.push(close);
        Ok(())
    }
}

/// A JSON string as Python writes it with `ensure_ascii=False`: only the
/// quote, the backslash and control characters are escaped.
fn write_string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// Python's `repr(float)` as `json.dumps` writes it: the shortest text that
/// reads back to the same value, `1.0` rather than `1`, exponents signed and
/// of at least two digits (`1e+16`, `1e-05`), and JavaScript's names for the
/// non-finite values.
fn python_float(f: f64) -> String {
    if f.is_nan() {
        return "NaN".into();
    }
    if f.is_infinite() {
        return if f > 0.0 { "Infinity" } else { "-Infinity" }.into();
    }
    // Rust's `{:?}` switches to exponents at the same bounds as Python's
    // repr (below 1e-4, from 1e16) and keeps the `.0` of integral values.
    let s = format!("{f:?}");
    match s.split_once('e') {
        Some((mantissa, exp)) => {
            let exp: i32 = exp.parse().expect("Rust writes integer exponents");
            let sign = if exp < 0 { '-' } else { '+' };
            format!("{mantissa}e{sign}{:02}", exp.unsigned_abs())
        }
        None => s,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floats_read_as_python_writes_them() {
        // CPython 3's json.dumps of the same values.
        let cases = [
            (1.0, "1.0"),
            (0.1, "0.1"),
            (1e-5, "1e-05"),
            (1e16, "1e+16"),
            (1e100, "1e+100"),
            (1.5e-7, "1.5e-07"),
            (1e-4, "0.0001"),
            (1e15, "1000000000000000.0"),
            (123456789.125, "123456789.125"),
            (-0.0, "-0.0"),
            (f64::INFINITY, "Infinity"),
        ];
        for (f, python) in cases {
            assert_eq!(python_float(f), python, "{f}");
        }
    }

    #[test]
    fn strings_escape_only_what_python_escapes() {
        let mut s = String::new();
        write_string(&mut s, "a\"b\\c\nd\u{1}é<&>'");
        assert_eq!(s, "\"a\\\"b\\\\c\\nd\\u0001é<&>'\"");
    }
}
