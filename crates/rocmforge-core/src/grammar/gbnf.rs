//! llama.cpp's GBNF grammars (llama-server's `grammar` field) in
//! llguidance's Lark-like syntax, which has the same model (rules of
//! sequences, alternatives, groups and `* + ? {m,n}` repetition) and
//! differs in spelling: `name ::= ...` is `name: ...`, `root` is `start`,
//! a character class `[a-z]` is the regular expression `/[a-z]/`, names
//! are lower case without hyphens, and a rule may not run over lines
//! (GBNF's may).

/// `gbnf` as a Lark grammar, or why it cannot be read (one line).
pub fn to_lark(gbnf: &str) -> Result<String, String> {
    let tokens = lex(gbnf)?;
    let mut rules: Vec<(String, Vec<String>)> = Vec::new();
    let mut i = 0;
    while i < tokens.len() {
        match (&tokens[i], tokens.get(i + 1)) {
            (Tok::Name(n), Some(Tok::Define)) => {
                rules.push((rule_name(n), Vec::new()));
                i += 2;
            }
            (t, _) => {
                let Some((_, body)) = rules.last_mut() else {
                    return Err(format!(
                        "the grammar must start with a rule (name ::= ...), not {t:?}"
                    ));
                };
                body.push(match t {
                    Tok::Name(n) => rule_name(n),
                    Tok::Define => return Err("'::=' without a rule name before it".into()),
                    Tok::Text(s) => s.clone(),
                });
                i += 1;
            }
        }
    }
    if !rules.iter().any(|(n, _)| n == "start") {
        return Err("the grammar has no root rule".into());
    }
    let mut out = String::new();
    for (name, body) in rules {
        if body.is_empty() {
            return Err(format!("rule '{name}' is empty"));
        }
        out.push_str(&format!("{name}: {}\n", body.join(" ")));
    }
    Ok(out)
}

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Name(String),
    Define,
    /// Lark text as it is emitted: a literal, a regular expression, an
    /// operator, a repetition or a parenthesis.
    Text(String),
}

/// GBNF's names (letters, digits, `-`) as Lark rule names: `root` is
/// `start`, the rest lower case with `_` and a prefix, so no GBNF name
/// meets a Lark keyword or another name by case.
fn rule_name(n: &str) -> String {
    if n == "root" {
        return "start".into();
    }
    let mut s = String::from("g_");
    for c in n.chars() {
        match c {
            '-' => s.push_str("_h_"),
            c if c.is_ascii_uppercase() => {
                s.push_str("_u");
                s.push(c.to_ascii_lowercase());
            }
            c => s.push(c),
        }
    }
    s
}

fn lex(src: &str) -> Result<Vec<Tok>, String> {
    let chars: Vec<char> = src.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        match c {
            c if c.is_whitespace() => i += 1,
            '#' => {
                while i < chars.len() && chars[i] != '\n' {
                    i += 1;
                }
            }
            ':' if chars[i..].starts_with(&[':', ':', '=']) => {
                out.push(Tok::Define);
                i += 3;
            }
            '"' => {
                let (text, next) = string(&chars, i + 1)?;
                out.push(Tok::Text(
                    serde_json::to_string(&text).map_err(|e| e.to_string())?,
                ));
                i = next;
            }
            '[' => {
                let start = i + 1;
                let mut j = start;
                while j < chars.len() && chars[j] != ']' {
                    j += if chars[j] == '\\' { 2 } else { 1 };
                }
                if j >= chars.len() {
                    return Err("a character class is not closed with ]".into());
                }
                let class: String = chars[start..j].iter().collect();
                out.push(Tok::Text(format!("/[{}]/", class.replace('/', "\\/"))));
                i = j + 1;
            }
            '.' => {
                out.push(Tok::Text("/(?s:.)/".into()));
                i += 1;
            }
            '(' | ')' | '|' | '*' | '+' | '?' => {
                out.push(Tok::Text(c.to_string()));
                i += 1;
            }
            '{' => {
                let j = chars[i..]
                    .iter()
                    .position(|&c| c == '}')
                    .ok_or("a repetition {m,n} is not closed")?;
                let inner: String = chars[i + 1..i + j]
                    .iter()
                    .filter(|c| !c.is_whitespace())
                    .collect();
                if inner.is_empty() || !inner.chars().all(|c| c.is_ascii_digit() || c == ',') {
                    return Err(format!("bad repetition {{{inner}}}"));
                }
                out.push(Tok::Text(format!("{{{inner}}}")));
                i += j + 1;
            }
            c if c.is_ascii_alphanumeric() || c == '-' || c == '_' => {
                let start = i;
                while i < chars.len()
                    && (chars[i].is_ascii_alphanumeric() || chars[i] == '-' || chars[i] == '_')
                {
                    i += 1;
                }
                out.push(Tok::Name(chars[start..i].iter().collect()));
            }
            c => return Err(format!("unexpected '{c}' in the grammar")),
        }
    }
    Ok(out)
}

/// A GBNF string literal from `start` (after its quote): its text and the
/// index after the closing quote.
fn string(chars: &[char], start: usize) -> Result<(String, usize), String> {
    let mut s = String::new();
    let mut i = start;
    while i < chars.len() {
        match chars[i] {
            '"' => return Ok((s, i + 1)),
            '\\' => {
                let e = *chars.get(i + 1).ok_or("a string ends in a backslash")?;
                i += 2;
                let hex = |n: usize, i: &mut usize| -> Result<char, String> {
                    let digits: String = chars
                        .get(*i..*i + n)
                        .ok_or("a short escape")?
                        .iter()
                        .collect();
                    *i += n;
                    u32::from_str_radix(&digits, 16)
                        .ok()
                        .and_then(char::from_u32)
                        .ok_or_else(|| format!("bad escape \\{e}{digits}"))
                };
                s.push(match e {
                    'n' => '\n',
                    'r' => '\r',
                    't' => '\t',
                    'x' => hex(2, &mut i)?,
                    'u' => hex(4, &mut i)?,
                    'U' => hex(8, &mut i)?,
                    other => other,
                });
            }
            c => {
                s.push(c);
                i += 1;
            }
        }
    }
    Err("a string is not closed with \"".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_classes_strings_and_repetitions_are_spelled_as_lark() {
        let gbnf = r#"
            # a list of answers
            root ::= answer ("," ws answer){0,3}
            answer ::= "yes" | "no" | num-list
            num-list ::= "[" [0-9]+ "]"
            ws ::= [ \t]*   # spaces
            Name ::= .
        "#;
        assert_eq!(
            to_lark(gbnf).unwrap(),
            "start: g_answer ( \",\" g_ws g_answer ) {0,3}\n\
             g_answer: \"yes\" | \"no\" | g_num_h_list\n\
             g_num_h_list: \"[\" /[0-9]/ + \"]\"\n\
             g_ws: /[ \\t]/ *\n\
             g__uname: /(?s:.)/\n"
        );
        // A rule may run over lines.
        assert_eq!(
            to_lark("root ::= \"a\"\n  | \"b\\n\"").unwrap(),
            "start: \"a\" | \"b\\n\"\n"
        );
    }

    #[test]
    fn what_cannot_be_read_says_why() {
        for (bad, why) in [
            ("answer ::= \"x\"", "no root"),
            ("root ::= \"x", "not closed"),
            ("root ::= [a-z", "not closed"),
            ("\"x\" root ::= \"y\"", "must start with a rule"),
            ("root ::= \"x\" {a}", "bad repetition"),
            ("root ::= $", "unexpected '$'"),
        ] {
            let e = to_lark(bad).unwrap_err();
            assert!(e.contains(why), "{bad}: {e}");
        }
    }
}
