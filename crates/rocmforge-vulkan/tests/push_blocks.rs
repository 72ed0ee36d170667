//! Every compiled shader's push-constant block has the layout of the
//! argument block core's lowering passes its kernel
//! (`rocmforge_core::gpu::push`, the source of truth; `kernels/push.h`
//! repeats it for HIP, pinned by `static_assert`s).
//!
//! The GLSL blocks are written by hand in `shaders/*.comp`, some under
//! `#if`, so this reads each variant's block back from the SPIR-V that
//! build.rs produced (the struct type of the one `PushConstant` variable:
//! member names, `Offset` decorations, scalar types, array lengths and
//! strides) and compares it, member by member, with the flattened
//! [`Field`] table of the struct that [`fields_of`] names for the variant.
//! A block may stop early (a kernel that reads none of the trailing
//! fields, e.g. `matvec` and `x_scales`) but must otherwise match: same
//! name (a trailing `_`, GLSL's escape of `out` and `floor`, aside), same
//! offset, same scalar type, same element count.
//!
//! No device is needed: this reads build outputs only.

use std::collections::HashMap;

use rocmforge_core::gpu::push::{fields_of, Field, Scalar, Ty};

#[allow(dead_code)] // the weight-type tables are the pipeline tests' business
mod compiled {
    include!(concat!(env!("OUT_DIR"), "/shaders.rs"));
}

/// One scalar or array member at its byte offset in the block, nested
/// structs flattened.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Member {
    name: String,
    offset: usize,
    scalar: Scalar,
    count: usize,
}

impl std::fmt::Display for Member {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ty = match self.scalar {
            Scalar::U32 => "u32",
            Scalar::F32 => "f32",
            Scalar::U64 => "u64",
        };
        if self.count == 1 {
            write!(f, "{} {ty} @{}", self.name, self.offset)
        } else {
            write!(f, "{} [{ty}; {}] @{}", self.name, self.count, self.offset)
        }
    }
}

/// A core table flattened (a nested block's fields at its offset plus
/// their own, by their own names: the GLSL blocks spell YaRN's four terms
/// out).
fn flatten(fields: &[Field], base: usize, out: &mut Vec<Member>) {
    for f in fields {
        let (scalar, count) = match f.ty {
            Ty::Scalar(s) => (s, 1),
            Ty::Array(s, n) => (s, n),
            Ty::Struct(inner) => {
                flatten(inner, base + f.offset, out);
                continue;
            }
        };
        out.push(Member {
            name: f.name.to_string(),
            offset: base + f.offset,
            scalar,
            count,
        });
    }
}

fn core_members(fields: &[Field]) -> Vec<Member> {
    let mut out = Vec::new();
    flatten(fields, 0, &mut out);
    out
}

// The few SPIR-V opcodes, decorations and storage classes read here
// (SPIR-V 1.5 specification, sections 3.20, 3.32 and 3.7).
const MAGIC: u32 = 0x0723_0203;
const OP_MEMBER_NAME: u32 = 6;
const OP_TYPE_INT: u32 = 21;
const OP_TYPE_FLOAT: u32 = 22;
const OP_TYPE_VECTOR: u32 = 23;
const OP_TYPE_ARRAY: u32 = 28;
const OP_TYPE_STRUCT: u32 = 30;
const OP_TYPE_POINTER: u32 = 32;
const OP_CONSTANT: u32 = 43;
const OP_VARIABLE: u32 = 59;
const OP_DECORATE: u32 = 71;
const OP_MEMBER_DECORATE: u32 = 72;
const DECORATION_ARRAY_STRIDE: u32 = 6;
const DECORATION_OFFSET: u32 = 35;
const STORAGE_PUSH_CONSTANT: u32 = 9;

/// What a module declares about its types, by result id.
#[derive(Default)]
struct Module {
    /// Type id -> its instruction's operands (after the result id).
    types: HashMap<u32, (u32, Vec<u32>)>,
    constants: HashMap<u32, u32>,
    member_names: HashMap<(u32, u32), String>,
    member_offsets: HashMap<(u32, u32), u32>,
    array_strides: HashMap<u32, u32>,
    /// The pointee type of each push-constant variable.
    push_blocks: Vec<u32>,
}

/// A null-terminated UTF-8 string literal packed into words.
fn literal_string(words: &[u32]) -> String {
    let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    String::from_utf8_lossy(&bytes[..end]).into_owned()
}

fn parse(words: &[u32]) -> Result<Module, String> {
    if words.len() < 5 || words[0] != MAGIC {
        return Err("not SPIR-V".into());
    }
    let mut m = Module::default();
    let mut pointers = HashMap::new();
    let mut push_pointers = Vec::new();
    let mut at = 5;
    while at < words.len() {
        let (count, op) = ((words[at] >> 16) as usize, words[at] & 0xffff);
        let inst = words
            .get(at..at + count)
            .filter(|_| count > 0)
            .ok_or_else(|| format!("truncated instruction at word {at}"))?;
        let args = &inst[1..];
        match op {
            OP_MEMBER_NAME => {
                m.member_names
                    .insert((args[0], args[1]), literal_string(&args[2..]));
            }
            OP_MEMBER_DECORATE if args[2] == DECORATION_OFFSET => {
                m.member_offsets.insert((args[0], args[1]), args[3]);
            }
            OP_DECORATE if args[1] == DECORATION_ARRAY_STRIDE => {
                m.array_strides.insert(args[0], args[2]);
            }
            OP_TYPE_INT | OP_TYPE_FLOAT | OP_TYPE_VECTOR | OP_TYPE_ARRAY | OP_TYPE_STRUCT => {
                m.types.insert(args[0], (op, args[1..].to_vec()));
            }
            OP_TYPE_POINTER => {
                pointers.insert(args[0], (args[1], args[2]));
            }
            // Array lengths are 32-bit integer constants.
            OP_CONSTANT if args.len() == 3 => {
                m.constants.insert(args[1], args[2]);
            }
            OP_VARIABLE if args[2] == STORAGE_PUSH_CONSTANT => {
                push_pointers.push(args[0]);
            }
            _ => {}
        }
        at += count;
    }
    for p in push_pointers {
        let &(class, pointee) = pointers
            .get(&p)
            .ok_or_else(|| format!("push-constant variable of unknown type %{p}"))?;
        if class != STORAGE_PUSH_CONSTANT {
            return Err(format!(
                "push-constant variable through a class-{class} pointer"
            ));
        }
        m.push_blocks.push(pointee);
    }
    Ok(m)
}

impl Module {
    /// The scalar type `id` names: unsigned 32-bit int, 32-bit float or
    /// unsigned 64-bit int (the only ones argument blocks hold).
    fn scalar(&self, id: u32) -> Result<Scalar, String> {
        match self.types.get(&id) {
            Some((OP_TYPE_INT, a)) if a[..] == [32, 0] => Ok(Scalar::U32),
            Some((OP_TYPE_INT, a)) if a[..] == [64, 0] => Ok(Scalar::U64),
            Some((OP_TYPE_FLOAT, a)) if a[0] == 32 => Ok(Scalar::F32),
            Some((op, a)) => Err(format!(
                "type %{id} (opcode {op} {a:?}) is no u32, f32 or u64"
            )),
            None => Err(format!("unknown type %{id}")),
        }
    }

    /// Appends the members of struct `id`, `base` bytes into the block.
    fn members(&self, id: u32, base: usize, out: &mut Vec<Member>) -> Result<(), String> {
        let Some((OP_TYPE_STRUCT, member_types)) = self.types.get(&id) else {
            return Err(format!("%{id} is not a struct"));
        };
        for (i, &ty) in member_types.iter().enumerate() {
            let key = (id, i as u32);
            let name = self.member_names.get(&key).cloned().unwrap_or_default();
            let offset = base
                + *self
                    .member_offsets
                    .get(&key)
                    .ok_or_else(|| format!("member {i} ({name}) has no Offset"))?
                    as usize;
            let (scalar, count) = match self.types.get(&ty) {
                Some((OP_TYPE_STRUCT, _)) => {
                    self.members(ty, offset, out)?;
                    continue;
                }
                Some((OP_TYPE_ARRAY, a)) => {
                    let scalar = self.scalar(a[0])?;
                    let len = *self
                        .constants
                        .get(&a[1])
                        .ok_or_else(|| format!("{name}: array length is not a constant"))?;
                    let stride = self.array_strides.get(&ty).copied();
                    if stride != Some(scalar.bytes() as u32) {
                        return Err(format!(
                            "{name}: array stride {stride:?}, not tightly packed"
                        ));
                    }
                    (scalar, len as usize)
                }
                // A vector is as many scalars, packed (std430 aligns
                // a vec3 / vec4 to 16, which the offsets then show).
                Some((OP_TYPE_VECTOR, a)) => (self.scalar(a[0])?, a[1] as usize),
                _ => (self.scalar(ty)?, 1),
            };
            out.push(Member {
                name: name.strip_suffix('_').unwrap_or(&name).to_string(),
                offset,
                scalar,
                count,
            });
        }
        Ok(())
    }
}

/// The push-constant block of a SPIR-V module, flattened.
fn shader_members(bytes: &[u8]) -> Result<Vec<Member>, String> {
    if !bytes.len().is_multiple_of(4) {
        return Err("length is not a whole number of words".into());
    }
    let words: Vec<u32> = bytes
        .chunks_exact(4)
        .map(|w| u32::from_le_bytes([w[0], w[1], w[2], w[3]]))
        .collect();
    let m = parse(&words)?;
    let [block] = m.push_blocks[..] else {
        return Err(format!(
            "{} push-constant variables, not one",
            m.push_blocks.len()
        ));
    };
    let mut out = Vec::new();
    m.members(block, 0, &mut out)?;
    Ok(out)
}

/// Why `shader`'s block disagrees with `core`'s, or None: `shader` must be
/// `core`, or its first members.
fn mismatch(shader: &[Member], core: &[Member]) -> Option<String> {
    if shader.is_empty() {
        return Some("the block is empty".into());
    }
    for (i, s) in shader.iter().enumerate() {
        match core.get(i) {
            Some(c) if c == s => {}
            Some(c) => return Some(format!("member {i}: shader has `{s}`, core has `{c}`")),
            None => {
                return Some(format!(
                    "member {i}: shader has `{s}` past the end of core's {} fields",
                    core.len()
                ))
            }
        }
    }
    None
}

/// The check this file exists for.
#[test]
fn push_blocks_are_core_argument_blocks() {
    let mut errors = Vec::new();
    let mut checked = 0;
    let mut shortened = Vec::new();
    for &(name, bytes) in compiled::SHADERS {
        let Some(fields) = fields_of(name) else {
            errors.push(format!(
                "{name}: core's gpu::push::fields_of does not know this kernel"
            ));
            continue;
        };
        let core = core_members(fields);
        match shader_members(bytes) {
            Err(e) => errors.push(format!("{name}: {e}")),
            Ok(shader) => {
                if let Some(why) = mismatch(&shader, &core) {
                    errors.push(format!("{name}: {why}"));
                } else if shader.len() < core.len() {
                    shortened.push(format!("{name} ({} of {})", shader.len(), core.len()));
                }
                checked += 1;
            }
        }
    }
    assert!(
        errors.is_empty(),
        "push-constant blocks that disagree with rocmforge_core::gpu::push:\n{}",
        errors.join("\n")
    );
    assert!(checked > 100, "only {checked} shaders");
    eprintln!(
        "{checked} blocks match; {} stop before core's last field",
        shortened.len()
    );
}

/// The comparison is not vacuous: a block read from SPIR-V tells apart
/// another struct's table and a table with one name, offset, type or
/// count changed.
#[test]
fn mismatches_are_caught() {
    let spirv = |name: &str| {
        let bytes = compiled::SHADERS
            .iter()
            .find(|(n, _)| *n == name)
            .unwrap_or_else(|| panic!("no {name}"))
            .1;
        shader_members(bytes).unwrap()
    };
    let norm = spirv("rmsnorm");
    let core = core_members(fields_of("rmsnorm").unwrap());
    assert_eq!(mismatch(&norm, &core), None);
    assert_eq!(norm.len(), core.len());

    // Other kernels' blocks (rope's ends where rope_kv's goes on).
    let rope = spirv("rope");
    assert_eq!(
        mismatch(&rope, &core_members(fields_of("rope").unwrap())),
        None
    );
    assert!(mismatch(&rope, &core_members(fields_of("rope_kv").unwrap())).is_some());
    assert!(mismatch(&norm, &core_members(fields_of("add").unwrap())).is_some());

    // One field changed. `eps` is the f32 among u32s: only its type tells.
    let eps = core.iter().position(|m| m.name == "eps").unwrap();
    let changes: [&dyn Fn(&mut Member); 4] = [
        &|m| m.scalar = Scalar::U32,
        &|m| m.offset += 4,
        &|m| m.name.push('x'),
        &|m| m.count = 2,
    ];
    for change in changes {
        let mut wrong = core.clone();
        change(&mut wrong[eps]);
        let why = mismatch(&norm, &wrong).expect("a changed field is caught");
        assert!(why.starts_with(&format!("member {eps}:")), "{why}");
    }

    // A block longer than core's table.
    assert!(mismatch(&norm, &core[..core.len() - 1]).is_some());

    // An array's length: MatPush's `rows` is [u32; 3].
    let mv = spirv("matvec_f32");
    let mut wrong = core_members(fields_of("matvec_f32").unwrap());
    let rows = wrong.iter().position(|m| m.name == "rows").unwrap();
    assert_eq!(mv[rows].count, 3);
    wrong[rows].count = 2;
    assert!(mismatch(&mv, &wrong).is_some());
}
