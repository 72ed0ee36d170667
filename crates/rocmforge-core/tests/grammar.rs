//! Constrained decoding on a real vocabulary (the tiny Qwen3 fixture's,
//! Qwen's 151k tokens): replies drawn at random among the tokens each mask
//! allows are what the schema or grammar describes, and bad schemas are
//! refused with a reason.

use std::path::Path;

use rocmforge_core::gguf::GgufFile;
use rocmforge_core::grammar::{Constraint, Grammars};
use rocmforge_core::tokenizer::Tokenizer;
use serde_json::{json, Value};

fn tokenizer() -> Tokenizer {
    let path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/reference/tiny-qwen3-Q8_0.gguf");
    let file = GgufFile::open(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    Tokenizer::from_gguf(&file).unwrap()
}

/// A reply of at most `max` tokens, each drawn (xorshift) among those the
/// mask allows; the text, and whether the grammar ended.
fn random_reply(tok: &Tokenizer, c: &mut Constraint, seed: u64, max: usize) -> (String, bool) {
    let mut s = seed | 1;
    let mut logits = vec![0.0f32; tok.vocab_size()];
    let mut bytes = Vec::new();
    for _ in 0..max {
        logits.fill(0.0);
        c.mask(&mut logits).unwrap();
        let allowed: Vec<u32> = (0..logits.len() as u32)
            .filter(|&i| logits[i as usize].is_finite())
            .collect();
        assert!(!allowed.is_empty(), "the mask allows nothing");
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        let id = allowed[(s % allowed.len() as u64) as usize];
        c.accept(id).unwrap();
        if tok.is_eog(id) {
            return (String::from_utf8(bytes).unwrap(), true);
        }
        bytes.extend(tok.token_to_piece(id));
    }
    (String::from_utf8_lossy(&bytes).into_owned(), false)
}

#[test]
fn replies_under_a_schema_are_valid_json_of_that_schema() {
    let tok = tokenizer();
    let g = Grammars::new(&tok).unwrap();
    let schema = json!({
        "type": "object",
        "properties": {
            "name": {"type": "string", "maxLength": 8},
            "age": {"type": "integer", "minimum": 0, "maximum": 120},
            "tags": {"type": "array", "items": {"enum": ["a", "b"]}, "maxItems": 3},
        },
        "required": ["name", "age", "tags"],
        "additionalProperties": false,
    });
    let mut ended = 0;
    for seed in 0..40 {
        let mut c = g.json_schema(&schema).unwrap();
        let (text, done) = random_reply(&tok, &mut c, seed, 400);
        if !done {
            continue;
        }
        ended += 1;
        let v: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
        let o = v
            .as_object()
            .unwrap_or_else(|| panic!("not an object: {text}"));
        assert_eq!(o.len(), 3, "{text}");
        assert!(
            o["name"].as_str().is_some_and(|n| n.chars().count() <= 8),
            "{text}"
        );
        assert!(o["age"].as_u64().is_some_and(|a| a <= 120), "{text}");
        let tags = o["tags"].as_array().unwrap();
        assert!(
            tags.len() <= 3 && tags.iter().all(|t| t == "a" || t == "b"),
            "{text}"
        );
        assert!(c.is_finished());
    }
    assert!(
        ended >= 20,
        "only {ended} of 40 random replies ended within 400 tokens"
    );
}

#[test]
fn json_object_and_lark_grammars_constrain_too() {
    let tok = tokenizer();
    let g = Grammars::new(&tok).unwrap();
    for seed in 0..10 {
        let mut c = g.lark(r#"start: ("yes" | "no") "!""#).unwrap();
        let (text, done) = random_reply(&tok, &mut c, seed, 20);
        assert!(done && (text == "yes!" || text == "no!"), "{text:?}");
    }
    // A GBNF grammar, as llama-server takes it.
    for seed in 0..10 {
        let mut c = g
            .gbnf("root ::= answer \"!\"\nanswer ::= \"yes\" | \"no\" | [0-9]{1,3}")
            .unwrap();
        let (text, done) = random_reply(&tok, &mut c, seed, 20);
        let body = text.strip_suffix('!').unwrap_or_else(|| panic!("{text:?}"));
        assert!(
            done && (body == "yes"
                || body == "no"
                || (1..=3).contains(&body.len()) && body.bytes().all(|b| b.is_ascii_digit())),
            "{text:?}"
        );
    }
    // Any object: one is taken token by token and may end there; an
    // array is not allowed to start.
    let mut c = g.json_object().unwrap();
    let mut logits = vec![0.0f32; tok.vocab_size()];
    for id in tok.encode(r#"{"a": [1, 2], "b": "x"}"#, false, false) {
        logits.fill(0.0);
        c.mask(&mut logits).unwrap();
        assert!(logits[id as usize].is_finite(), "token {id} refused");
        c.accept(id).unwrap();
    }
    logits.fill(0.0);
    c.mask(&mut logits).unwrap();
    let end = tok.eot().or(tok.eos()).unwrap();
    assert!(logits[end as usize].is_finite(), "a whole object may end");
    let mut c = g.json_object().unwrap();
    logits.fill(0.0);
    c.mask(&mut logits).unwrap();
    let open = tok.encode("[", false, false)[0];
    assert!(
        !logits[open as usize].is_finite(),
        "an array is not an object"
    );
}

#[test]
fn bad_schemas_and_grammars_are_refused_with_a_reason() {
    let tok = tokenizer();
    let g = Grammars::new(&tok).unwrap();
    for schema in [
        json!({"type": "no-such-type"}),
        json!({"type": "object", "properties": {"a": {"$ref": "#/nowhere"}}}),
    ] {
        let e = g.json_schema(&schema).err().expect("refused");
        assert!(!e.to_string().is_empty());
    }
    let e = g.lark("start: undefined_rule").err().expect("refused");
    assert!(e.to_string().contains("undefined_rule"), "{e}");
}
