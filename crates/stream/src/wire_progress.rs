//! Hand-written codec for [`ProgressMsg`], the smallest and most frequent message (one per env step).
//!
//! The serde path (rmp_serde's named encoding, serde decode) costs about as much CPU as zenoh's own work for a
//! 126-byte message. This writes the **same bytes** as rmp_serde's named encoding (fields in declaration order,
//! the smallest msgpack type for each integer, str and array length, float32 for floats) and reads a msgpack
//! map without serde (`rmp` only classifies the marker bytes).
//!
//! Decoding is a fast path with the serde path behind it: the fast parser accepts only what it is sure the
//! serde path decodes to the same value (a map with string keys, in any order, unknown keys skipped); on
//! anything else (a missing or duplicate field, a wrong type, an unsupported schema, truncated bytes, a value
//! it does not know how to skip) it gives up and the serde path decodes the bytes, so errors (kind and text)
//! and the rare inputs the fast parser leaves alone decode exactly as before. `wire_tests.rs` checks both
//! directions with proptests.

use super::{ProgressMsg, WireError, WireMessage, SCHEMA_VERSION};
use rmp::Marker;

// The encoder writes `schema` as one positive fixint byte.
const _: () = assert!(SCHEMA_VERSION < 128);

/// The keys in the order the encoder writes them, as msgpack fixstr (header byte, then the name).
const KEYS: [&[u8]; 11] = [
    b"\xa6schema",
    b"\xa4kind",
    b"\xa5robot",
    b"\xa3env",
    b"\xa7episode",
    b"\xa4step",
    b"\xa5stage",
    b"\xabstage_probs",
    b"\xa3tau",
    b"\xa3phi",
    b"\xa8stamp_ns",
];

/// A msgpack unsigned integer in its smallest form (what `rmp::encode::write_uint` writes).
#[inline]
fn put_uint(out: &mut Vec<u8>, v: u64) {
    if v < 128 {
        out.push(v as u8);
    } else if let Ok(v) = u8::try_from(v) {
        out.extend_from_slice(&[0xcc, v]);
    } else if let Ok(v) = u16::try_from(v) {
        out.push(0xcd);
        out.extend_from_slice(&v.to_be_bytes());
    } else if let Ok(v) = u32::try_from(v) {
        out.push(0xce);
        out.extend_from_slice(&v.to_be_bytes());
    } else {
        out.push(0xcf);
        out.extend_from_slice(&v.to_be_bytes());
    }
}

/// A str or array header: `fix | len` below `fix_limit`, else the 8- (str only), 16- or 32-bit form.
#[inline]
fn put_len(
    out: &mut Vec<u8>,
    len: usize,
    fix: u8,
    fix_limit: usize,
    wide: [Option<u8>; 3],
) -> Option<()> {
    if len < fix_limit {
        out.push(fix | len as u8);
    } else if let (Some(m), Ok(n)) = (wide[0], u8::try_from(len)) {
        out.extend_from_slice(&[m, n]);
    } else if let (Some(m), Ok(n)) = (wide[1], u16::try_from(len)) {
        out.push(m);
        out.extend_from_slice(&n.to_be_bytes());
    } else {
        out.push(wide[2]?);
        out.extend_from_slice(&u32::try_from(len).ok()?.to_be_bytes());
    }
    Some(())
}

#[inline]
fn put_f32(out: &mut Vec<u8>, v: f32) {
    out.push(0xca);
    out.extend_from_slice(&v.to_be_bytes());
}

/// Appends `msg`'s wire bytes to `out`: byte for byte what `rmp_serde::encode::write_named` writes (the
/// smallest msgpack form of every integer, str and array length; float32 for floats).
pub(super) fn encode_into(msg: &ProgressMsg, out: &mut Vec<u8>) -> Result<(), WireError> {
    const STR: (u8, usize, [Option<u8>; 3]) = (0xa0, 32, [Some(0xd9), Some(0xda), Some(0xdb)]);
    const ARRAY: (u8, usize, [Option<u8>; 3]) = (0x90, 16, [None, Some(0xdc), Some(0xdd)]);
    let too_long = |field: &str, len: usize| WireError::Encode {
        kind: ProgressMsg::KIND,
        reason: format!("`{field}` has {len} elements; msgpack allows at most 2^32 - 1"),
    };
    // Checked before anything is written, so that a failed encode leaves `out` as it was.
    for (field, len) in [
        ("robot", msg.robot.len()),
        ("stage_probs", msg.stage_probs.len()),
    ] {
        if u32::try_from(len).is_err() {
            return Err(too_long(field, len));
        }
    }
    // At most: keys 70 bytes, `kind` 9, integers 9 each, floats 5 each, str/array headers 5 each.
    out.reserve(160 + msg.robot.len() + 5 * msg.stage_probs.len());
    out.push(0x8b); // fixmap, 11 entries
    out.extend_from_slice(KEYS[0]);
    out.push(SCHEMA_VERSION as u8);
    out.extend_from_slice(KEYS[1]);
    out.extend_from_slice(b"\xa8progress");
    out.extend_from_slice(KEYS[2]);
    put_len(out, msg.robot.len(), STR.0, STR.1, STR.2)
        .ok_or_else(|| too_long("robot", msg.robot.len()))?;
    out.extend_from_slice(msg.robot.as_bytes());
    out.extend_from_slice(KEYS[3]);
    put_uint(out, u64::from(msg.env));
    out.extend_from_slice(KEYS[4]);
    put_uint(out, msg.episode);
    out.extend_from_slice(KEYS[5]);
    put_uint(out, msg.step);
    out.extend_from_slice(KEYS[6]);
    put_uint(out, u64::from(msg.stage));
    out.extend_from_slice(KEYS[7]);
    put_len(out, msg.stage_probs.len(), ARRAY.0, ARRAY.1, ARRAY.2)
        .ok_or_else(|| too_long("stage_probs", msg.stage_probs.len()))?;
    for &p in &msg.stage_probs {
        put_f32(out, p);
    }
    out.extend_from_slice(KEYS[8]);
    put_f32(out, msg.tau);
    out.extend_from_slice(KEYS[9]);
    put_f32(out, msg.phi);
    out.extend_from_slice(KEYS[10]);
    put_uint(out, msg.stamp_ns);
    Ok(())
}

/// Decodes like the serde path, faster: the fast parser, and the serde path where it gives up.
pub(super) fn decode(bytes: &[u8]) -> Result<ProgressMsg, WireError> {
    match decode_fast(bytes) {
        Some(m) => Ok(m),
        None => super::decode_serde(bytes),
    }
}

/// Nesting the fast parser skips inside unknown values before it leaves them to the serde path (whose limit
/// is 1024).
const SKIP_DEPTH: u32 = 16;

/// A msgpack number as rmp_serde hands it to serde's visitors.
#[derive(Clone, Copy)]
enum Num {
    U(u64),
    I(i64),
    F32(f32),
    F64(f64),
}

struct Reader<'a> {
    rest: &'a [u8],
}

impl<'a> Reader<'a> {
    #[inline]
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.rest.len() < n {
            return None;
        }
        let (head, tail) = self.rest.split_at(n);
        self.rest = tail;
        Some(head)
    }

    #[inline]
    fn array<const N: usize>(&mut self) -> Option<[u8; N]> {
        self.take(N)?.try_into().ok()
    }

    #[inline]
    fn marker(&mut self) -> Option<Marker> {
        let (&b, tail) = self.rest.split_first()?;
        self.rest = tail;
        Some(Marker::from_u8(b))
    }

    #[inline]
    fn len8(&mut self) -> Option<usize> {
        Some(usize::from(self.array::<1>()?[0]))
    }

    #[inline]
    fn len16(&mut self) -> Option<usize> {
        Some(usize::from(u16::from_be_bytes(self.array()?)))
    }

    #[inline]
    fn len32(&mut self) -> Option<usize> {
        usize::try_from(u32::from_be_bytes(self.array()?)).ok()
    }

    /// A number (rmp_serde's `any_num` without nil and bool, which no numeric field accepts).
    #[inline]
    fn num(&mut self) -> Option<Num> {
        Some(match self.marker()? {
            Marker::FixPos(v) => Num::U(u64::from(v)),
            Marker::FixNeg(v) => Num::I(i64::from(v)),
            Marker::U8 => Num::U(u64::from(self.array::<1>()?[0])),
            Marker::U16 => Num::U(u64::from(u16::from_be_bytes(self.array()?))),
            Marker::U32 => Num::U(u64::from(u32::from_be_bytes(self.array()?))),
            Marker::U64 => Num::U(u64::from_be_bytes(self.array()?)),
            Marker::I8 => Num::I(i64::from(i8::from_be_bytes(self.array()?))),
            Marker::I16 => Num::I(i64::from(i16::from_be_bytes(self.array()?))),
            Marker::I32 => Num::I(i64::from(i32::from_be_bytes(self.array()?))),
            Marker::I64 => Num::I(i64::from_be_bytes(self.array()?)),
            Marker::F32 => Num::F32(f32::from_be_bytes(self.array()?)),
            Marker::F64 => Num::F64(f64::from_be_bytes(self.array()?)),
            _ => return None,
        })
    }

    /// An unsigned integer as serde's `u64` reads it: any integer type, non-negative. No floats.
    #[inline]
    fn u64(&mut self) -> Option<u64> {
        match self.num()? {
            Num::U(v) => Some(v),
            Num::I(v) => u64::try_from(v).ok(),
            Num::F32(_) | Num::F64(_) => None,
        }
    }

    #[inline]
    fn u32(&mut self) -> Option<u32> {
        u32::try_from(self.u64()?).ok()
    }

    /// A float as serde's `f32` reads it: any float or integer, converted with `as` (and a float64 NaN keeps
    /// its sign, as serde's visitor does).
    #[inline]
    fn f32(&mut self) -> Option<f32> {
        Some(match self.num()? {
            Num::U(v) => v as f32,
            Num::I(v) => v as f32,
            Num::F32(v) => v,
            Num::F64(v) => {
                let sign = if v.is_sign_positive() { 1.0 } else { -1.0 };
                (v as f32).copysign(sign)
            }
        })
    }

    /// The bytes of a msgpack str (not checked for UTF-8).
    #[inline]
    fn str_bytes(&mut self) -> Option<&'a [u8]> {
        let len = match self.marker()? {
            Marker::FixStr(n) => usize::from(n),
            Marker::Str8 => self.len8()?,
            Marker::Str16 => self.len16()?,
            Marker::Str32 => self.len32()?,
            _ => return None,
        };
        self.take(len)
    }

    fn f32_array(&mut self) -> Option<Vec<f32>> {
        let len = match self.marker()? {
            Marker::FixArray(n) => usize::from(n),
            Marker::Array16 => self.len16()?,
            Marker::Array32 => self.len32()?,
            _ => return None,
        };
        // Every element takes at least one byte: never reserve more than the input could hold.
        let mut v = Vec::with_capacity(len.min(self.rest.len()));
        for _ in 0..len {
            v.push(self.f32()?);
        }
        Some(v)
    }

    /// Skips one value of a key this build does not know. Gives up (None) on reserved bytes, truncation and
    /// deep nesting: the serde path then decides.
    fn skip(&mut self, depth: u32) -> Option<()> {
        let n = match self.marker()? {
            Marker::Null | Marker::True | Marker::False | Marker::FixPos(_) | Marker::FixNeg(_) => {
                0
            }
            Marker::U8 | Marker::I8 => 1,
            Marker::U16 | Marker::I16 => 2,
            Marker::U32 | Marker::I32 | Marker::F32 => 4,
            Marker::U64 | Marker::I64 | Marker::F64 => 8,
            Marker::FixStr(n) => usize::from(n),
            Marker::Str8 | Marker::Bin8 => self.len8()?,
            Marker::Str16 | Marker::Bin16 => self.len16()?,
            Marker::Str32 | Marker::Bin32 => self.len32()?,
            // Extension types: a type byte, then the data.
            Marker::FixExt1 => 2,
            Marker::FixExt2 => 3,
            Marker::FixExt4 => 5,
            Marker::FixExt8 => 9,
            Marker::FixExt16 => 17,
            Marker::Ext8 => 1 + self.len8()?,
            Marker::Ext16 => 1 + self.len16()?,
            Marker::Ext32 => self.len32()?.checked_add(1)?,
            m @ (Marker::FixArray(_)
            | Marker::Array16
            | Marker::Array32
            | Marker::FixMap(_)
            | Marker::Map16
            | Marker::Map32) => {
                if depth >= SKIP_DEPTH {
                    return None;
                }
                let items = match m {
                    Marker::FixArray(n) => usize::from(n),
                    Marker::FixMap(n) => 2 * usize::from(n),
                    Marker::Array16 => self.len16()?,
                    Marker::Map16 => 2 * self.len16()?,
                    Marker::Array32 => self.len32()?,
                    _ => 2 * self.len32()?,
                };
                for _ in 0..items {
                    self.skip(depth + 1)?;
                }
                return Some(());
            }
            _ => return None,
        };
        self.take(n).map(|_| ())
    }
}

/// The fields read so far.
#[derive(Default)]
struct Fields {
    robot: String,
    env: u32,
    episode: u64,
    step: u64,
    stage: u32,
    stage_probs: Vec<f32>,
    tau: f32,
    phi: f32,
    stamp_ns: u64,
}

impl Fields {
    /// Reads the value of field `index` (of [`KEYS`]) as the serde derive would, or gives up.
    #[inline(always)]
    fn read(&mut self, index: usize, r: &mut Reader) -> Option<()> {
        match index {
            0 => {
                let v = r.u64()?;
                if v == 0 || v > u64::from(SCHEMA_VERSION) {
                    return None;
                }
            }
            1 => {
                if r.str_bytes()? != ProgressMsg::KIND.as_bytes() {
                    return None;
                }
            }
            2 => self.robot = std::str::from_utf8(r.str_bytes()?).ok()?.to_owned(),
            3 => self.env = r.u32()?,
            4 => self.episode = r.u64()?,
            5 => self.step = r.u64()?,
            6 => self.stage = r.u32()?,
            7 => self.stage_probs = r.f32_array()?,
            8 => self.tau = r.f32()?,
            9 => self.phi = r.f32()?,
            _ => self.stamp_ns = r.u64()?,
        }
        Some(())
    }
}

/// The fast parser: Some only for a map that the serde path decodes to the same message (and validation
/// passes: `ProgressMsg` has no checks beyond the types). Trailing bytes after the map are ignored, as
/// `rmp_serde::from_slice` does.
pub(super) fn decode_fast(bytes: &[u8]) -> Option<ProgressMsg> {
    let mut r = Reader { rest: bytes };
    let entries = match r.marker()? {
        Marker::FixMap(n) => usize::from(n),
        Marker::Map16 => r.len16()?,
        Marker::Map32 => r.len32()?,
        _ => return None,
    };
    let mut f = Fields::default();
    // Keys in the order the encoder writes them (ours, and any sender that keeps the documented order): no
    // lookup.
    // Unrolled so that every key comparison is against a constant (no memcmp call, no jump table).
    let mut done = 0;
    let canonical = entries.min(KEYS.len());
    macro_rules! in_order {
        ($($i:literal)*) => {$(
            if done == $i && $i < canonical && r.rest.starts_with(KEYS[$i]) {
                r.rest = &r.rest[KEYS[$i].len()..];
                f.read($i, &mut r)?;
                done += 1;
            }
        )*};
    }
    in_order!(0 1 2 3 4 5 6 7 8 9 10);
    let mut seen: u16 = (1 << done) - 1;
    // The rest in any order; unknown keys are skipped, a field seen twice is the serde path's to report.
    for _ in done..entries {
        let key = r.str_bytes()?;
        match KEYS.iter().position(|k| &k[1..] == key) {
            Some(i) => {
                if seen & (1 << i) != 0 {
                    return None;
                }
                seen |= 1 << i;
                f.read(i, &mut r)?;
            }
            None => r.skip(1)?,
        }
    }
    if seen != (1 << KEYS.len()) - 1 {
        return None;
    }
    Some(ProgressMsg {
        schema: super::Schema,
        kind: super::kind::Progress,
        robot: f.robot,
        env: f.env,
        episode: f.episode,
        step: f.step,
        stage: f.stage,
        stage_probs: f.stage_probs,
        tau: f.tau,
        phi: f.phi,
        stamp_ns: f.stamp_ns,
    })
}
