//! Metadata values and their on-disk type ids.

/// A metadata value. Arrays in a file are homogeneous; an `Array` read from a
/// file therefore holds elements of one variant (arrays of arrays may differ in
/// their inner element types, as GGUF allows).
#[derive(Debug, Clone, PartialEq)]
pub enum GgufValue {
    U8(u8),
    I8(i8),
    U16(u16),
    I16(i16),
    U32(u32),
    I32(i32),
    F32(f32),
    Bool(bool),
    String(String),
    U64(u64),
    I64(i64),
    F64(f64),
    Array(Vec<GgufValue>),
}

impl GgufValue {
    /// Any integer type holding a non-negative value.
    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            GgufValue::U8(v) => Some(v.into()),
            GgufValue::U16(v) => Some(v.into()),
            GgufValue::U32(v) => Some(v.into()),
            GgufValue::U64(v) => Some(v),
            GgufValue::I8(v) => u64::try_from(v).ok(),
            GgufValue::I16(v) => u64::try_from(v).ok(),
            GgufValue::I32(v) => u64::try_from(v).ok(),
            GgufValue::I64(v) => u64::try_from(v).ok(),
            _ => None,
        }
    }

    /// Any integer type whose value fits in i64.
    pub fn as_i64(&self) -> Option<i64> {
        match *self {
            GgufValue::I8(v) => Some(v.into()),
            GgufValue::I16(v) => Some(v.into()),
            GgufValue::I32(v) => Some(v.into()),
            GgufValue::I64(v) => Some(v),
            GgufValue::U8(v) => Some(v.into()),
            GgufValue::U16(v) => Some(v.into()),
            GgufValue::U32(v) => Some(v.into()),
            GgufValue::U64(v) => i64::try_from(v).ok(),
            _ => None,
        }
    }

    /// Any integer type whose value fits in u32. Converters disagree on whether
    /// counts are u32, i32 or u64, so callers should not care.
    pub fn as_u32(&self) -> Option<u32> {
        self.as_u64().and_then(|v| u32::try_from(v).ok())
    }

    /// F32, F64 (rounded) or any integer (converted), since some converters
    /// write float hyper-parameters such as `rope.freq_base` as integers.
    pub fn as_f32(&self) -> Option<f32> {
        match *self {
            GgufValue::F32(v) => Some(v),
            GgufValue::F64(v) => Some(v as f32),
            _ => self
                .as_i64()
                .map(|v| v as f32)
                .or_else(|| self.as_u64().map(|v| v as f32)),
        }
    }

    pub fn as_bool(&self) -> Option<bool> {
        match *self {
            GgufValue::Bool(v) => Some(v),
            _ => None,
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            GgufValue::String(s) => Some(s),
            _ => None,
        }
    }

    pub fn as_array(&self) -> Option<&[GgufValue]> {
        match self {
            GgufValue::Array(a) => Some(a),
            _ => None,
        }
    }

    /// `"u32"`, `"string"`, `"array[string]"`, `"array[array]"`; an empty array
    /// is just `"array"` because its element type is not kept.
    pub fn type_name(&self) -> &'static str {
        match self {
            GgufValue::Array(items) => match items.first() {
                None => "array",
                Some(first) => ValueType::of(first).array_name(),
            },
            other => ValueType::of(other).name(),
        }
    }

    /// The value in a few words for an error message: numbers with their
    /// type (floats in `Debug` form, which switches to exponents for huge
    /// and tiny values), strings quoted, escaped and cut short, arrays by element type
    /// and length. Always one line, and short whatever the value, so a
    /// message about a 150k-entry token list stays readable.
    pub fn brief(&self) -> String {
        // Counted after escaping: a string of control characters escapes
        // to several times its length.
        const MAX_ESCAPED: usize = 48;
        match self {
            GgufValue::String(s) => {
                let mut out = String::new();
                for c in s.chars() {
                    if out.len() >= MAX_ESCAPED {
                        out.push('…');
                        break;
                    }
                    out.extend(c.escape_debug());
                }
                format!("\"{out}\" (string)")
            }
            GgufValue::Array(items) => {
                let n = items.len();
                let s = if n == 1 { "" } else { "s" };
                format!("{} of {n} element{s}", self.type_name())
            }
            GgufValue::U8(v) => format!("{v} (u8)"),
            GgufValue::I8(v) => format!("{v} (i8)"),
            GgufValue::U16(v) => format!("{v} (u16)"),
            GgufValue::I16(v) => format!("{v} (i16)"),
            GgufValue::U32(v) => format!("{v} (u32)"),
            GgufValue::I32(v) => format!("{v} (i32)"),
            GgufValue::U64(v) => format!("{v} (u64)"),
            GgufValue::I64(v) => format!("{v} (i64)"),
            GgufValue::F32(v) => format!("{v:?} (f32)"),
            GgufValue::F64(v) => format!("{v:?} (f64)"),
            GgufValue::Bool(v) => format!("{v} (bool)"),
        }
    }
}

/// The on-disk value type ids (`gguf_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ValueType {
    U8,
    I8,
    U16,
    I16,
    U32,
    I32,
    F32,
    Bool,
    String,
    Array,
    U64,
    I64,
    F64,
}

/// (type, id, name, name as an array element type, smallest encoding in bytes)
const VALUE_TYPES: &[(ValueType, u32, &str, &str, u64)] = &[
    (ValueType::U8, 0, "u8", "array[u8]", 1),
    (ValueType::I8, 1, "i8", "array[i8]", 1),
    (ValueType::U16, 2, "u16", "array[u16]", 2),
    (ValueType::I16, 3, "i16", "array[i16]", 2),
    (ValueType::U32, 4, "u32", "array[u32]", 4),
    (ValueType::I32, 5, "i32", "array[i32]", 4),
    (ValueType::F32, 6, "f32", "array[f32]", 4),
    (ValueType::Bool, 7, "bool", "array[bool]", 1),
    // u64 length, then the bytes
    (ValueType::String, 8, "string", "array[string]", 8),
    // u32 element type, u64 count
    (ValueType::Array, 9, "array", "array[array]", 12),
    (ValueType::U64, 10, "u64", "array[u64]", 8),
    (ValueType::I64, 11, "i64", "array[i64]", 8),
    (ValueType::F64, 12, "f64", "array[f64]", 8),
];

impl ValueType {
    fn row(self) -> &'static (ValueType, u32, &'static str, &'static str, u64) {
        // The table has a row for every variant, in declaration order.
        &VALUE_TYPES[self as usize]
    }

    pub(crate) fn from_id(id: u32) -> Option<Self> {
        VALUE_TYPES.iter().find(|r| r.1 == id).map(|r| r.0)
    }

    pub(crate) fn of(value: &GgufValue) -> Self {
        match value {
            GgufValue::U8(_) => ValueType::U8,
            GgufValue::I8(_) => ValueType::I8,
            GgufValue::U16(_) => ValueType::U16,
            GgufValue::I16(_) => ValueType::I16,
            GgufValue::U32(_) => ValueType::U32,
            GgufValue::I32(_) => ValueType::I32,
            GgufValue::F32(_) => ValueType::F32,
            GgufValue::Bool(_) => ValueType::Bool,
            GgufValue::String(_) => ValueType::String,
            GgufValue::U64(_) => ValueType::U64,
            GgufValue::I64(_) => ValueType::I64,
            GgufValue::F64(_) => ValueType::F64,
            GgufValue::Array(_) => ValueType::Array,
        }
    }

    pub(crate) fn id(self) -> u32 {
        self.row().1
    }

    pub(crate) fn name(self) -> &'static str {
        self.row().2
    }

    pub(crate) fn array_name(self) -> &'static str {
        self.row().3
    }

    /// Fewest bytes one value of this type can occupy; bounds array counts by
    /// the bytes left in the file.
    pub(crate) fn min_encoded_size(self) -> u64 {
        self.row().4
    }
}

macro_rules! value_from {
    ($($t:ty => $variant:ident),* $(,)?) => {
        $(impl From<$t> for GgufValue {
            fn from(v: $t) -> Self {
                GgufValue::$variant(v)
            }
        })*
    };
}

value_from!(
    u8 => U8, i8 => I8, u16 => U16, i16 => I16, u32 => U32, i32 => I32, f32 => F32,
    bool => Bool, String => String, u64 => U64, i64 => I64, f64 => F64,
);

impl From<&str> for GgufValue {
    fn from(v: &str) -> Self {
        GgufValue::String(v.to_owned())
    }
}

impl<T: Into<GgufValue>> From<Vec<T>> for GgufValue {
    fn from(v: Vec<T>) -> Self {
        GgufValue::Array(v.into_iter().map(Into::into).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_matches_declaration_order() {
        for (i, row) in VALUE_TYPES.iter().enumerate() {
            assert_eq!(row.0 as usize, i);
            assert_eq!(ValueType::from_id(row.1), Some(row.0));
        }
        assert_eq!(ValueType::from_id(13), None);
    }

    #[test]
    fn integer_accessors_respect_ranges() {
        assert_eq!(GgufValue::I32(-1).as_u64(), None);
        assert_eq!(GgufValue::I32(-1).as_i64(), Some(-1));
        assert_eq!(GgufValue::U64(u64::MAX).as_i64(), None);
        assert_eq!(GgufValue::U64(1 << 32).as_u32(), None);
        assert_eq!(GgufValue::I16(7).as_u32(), Some(7));
        assert_eq!(GgufValue::F32(1.5).as_u64(), None);
        assert_eq!(GgufValue::U32(10000).as_f32(), Some(10000.0));
        assert_eq!(GgufValue::F64(0.25).as_f32(), Some(0.25));
        assert_eq!(GgufValue::U64(u64::MAX).as_f32(), Some(u64::MAX as f32));
        assert_eq!(GgufValue::Bool(true).as_u64(), None);
        assert_eq!(GgufValue::String("x".into()).as_bool(), None);
    }

    #[test]
    fn brief_is_short_and_one_line() {
        assert_eq!(GgufValue::I32(-1).brief(), "-1 (i32)");
        assert_eq!(GgufValue::F32(f32::NAN).brief(), "NaN (f32)");
        assert_eq!(GgufValue::from("a\nb").brief(), "\"a\\nb\" (string)");
        let long = GgufValue::from("x".repeat(1000)).brief();
        assert!(long.len() < 70, "{long}");
        let controls = GgufValue::from("\u{19}".repeat(1000)).brief();
        assert!(controls.len() < 80, "{controls}");
        assert_eq!(
            GgufValue::from(vec![1u32, 2, 3]).brief(),
            "array[u32] of 3 elements"
        );
        assert_eq!(GgufValue::Array(vec![]).brief(), "array of 0 elements");
    }

    #[test]
    fn type_names() {
        assert_eq!(GgufValue::U32(1).type_name(), "u32");
        assert_eq!(GgufValue::from(vec!["a"]).type_name(), "array[string]");
        assert_eq!(
            GgufValue::from(vec![GgufValue::from(vec![1u8])]).type_name(),
            "array[array]"
        );
        assert_eq!(GgufValue::Array(vec![]).type_name(), "array");
    }
}
