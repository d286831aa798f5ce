//! Transitions without copying their images on the way out: [`TransitionMsg::encode_parts`] encodes a
//! transition it consumes into [`WireParts`], runs of msgpack header bytes and, between them, the tensors' own
//! buffers (those of at least [`PART_MIN`] bytes) moved in rather than copied. Concatenated, the parts are byte
//! for byte [`encode`](crate::encode)'s output (docs/wire.md, unchanged); a transport sends them as one payload
//! and receivers see one message.

use crate::message::{Message, TransitionMsg, WireError};
use crate::tensor::Tensor;
use std::borrow::Cow;
use std::marker::PhantomData;

/// A message of type `M`, encoded: its wire bytes ([`Message::into_parts`]: a transition's image buffers
/// moved in, not copied), tagged with the type so that a publisher takes it only for `M`'s key. Encode once, then
/// hand the same bytes to every sink (an episode log, a publisher).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Encoded<M> {
    parts: WireParts,
    kind: PhantomData<fn() -> M>,
}

impl<M: Message> Encoded<M> {
    /// Encodes `msg`.
    pub fn new(msg: M) -> Result<Self, WireError> {
        Ok(Self {
            parts: msg.into_parts()?,
            kind: PhantomData,
        })
    }
}

impl<M> Encoded<M> {
    /// The wire bytes, in pieces.
    pub fn parts(&self) -> &WireParts {
        &self.parts
    }
    /// The wire bytes in one buffer (a copy when there are several parts).
    pub fn to_vec(&self) -> Vec<u8> {
        self.parts.to_vec()
    }
    /// The wire bytes in one slice: borrowed when they are one part, else concatenated.
    pub fn contiguous(&self) -> Cow<'_, [u8]> {
        self.parts.contiguous()
    }
    pub fn into_parts(self) -> WireParts {
        self.parts
    }
}

/// Tensors whose data have at least this many bytes are moved into [`WireParts`] as parts of their own;
/// smaller ones are copied into the header run around them (a part costs the transport a slice and a reference
/// count).
pub const PART_MIN: usize = 1024;

/// A message's wire bytes in pieces: runs of msgpack header bytes and, between them, tensor buffers moved out
/// of the message. [`WireParts::to_vec`] (the concatenation) equals [`encode`](crate::encode)'s output.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct WireParts {
    parts: Vec<Vec<u8>>,
}

impl WireParts {
    /// The pieces, in wire order (empty pieces are left out).
    pub fn parts(&self) -> &[Vec<u8>] {
        &self.parts
    }
    /// Total bytes.
    pub fn len(&self) -> usize {
        self.parts.iter().map(Vec::len).sum()
    }
    pub fn is_empty(&self) -> bool {
        self.parts.is_empty()
    }
    /// The wire bytes in one slice: borrowed when they are one part, else concatenated.
    pub fn contiguous(&self) -> Cow<'_, [u8]> {
        match self.parts.as_slice() {
            [] => Cow::Borrowed(&[]),
            [one] => Cow::Borrowed(one),
            parts => Cow::Owned(parts.concat()),
        }
    }
    /// The wire bytes in one buffer (a copy).
    pub fn to_vec(&self) -> Vec<u8> {
        match self.parts.as_slice() {
            [one] => one.clone(),
            parts => parts.concat(),
        }
    }
    /// The pieces, moved out (a transport sends them as one payload without copying them).
    pub fn into_parts(self) -> Vec<Vec<u8>> {
        self.parts
    }
}

/// One part: wire bytes already in one buffer (what [`encode`](crate::encode) returns).
impl From<Vec<u8>> for WireParts {
    fn from(bytes: Vec<u8>) -> Self {
        Self {
            parts: if bytes.is_empty() {
                Vec::new()
            } else {
                vec![bytes]
            },
        }
    }
}

/// What [`SplitWriter`] saw: a run of header bytes, or the `i`th big tensor's data.
enum Piece {
    Head(Vec<u8>),
    Tensor(usize),
}

/// A `Write` sink for rmp_serde that records, instead of copying, a write of exactly one of the `big` tensor
/// buffers (address and length; rmp writes a `bin`'s data in one `write_all`). Anything else is copied into
/// the current header run, so the bytes are rmp_serde's whatever it does.
struct SplitWriter<'t> {
    big: &'t [(usize, usize)],
    used: Vec<bool>,
    head: Vec<u8>,
    pieces: Vec<Piece>,
}

impl std::io::Write for SplitWriter<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if buf.len() >= PART_MIN {
            let at = (buf.as_ptr() as usize, buf.len());
            if let Some(i) = (0..self.big.len()).find(|&i| !self.used[i] && self.big[i] == at) {
                self.used[i] = true;
                let head = std::mem::replace(&mut self.head, Vec::with_capacity(256));
                self.pieces.push(Piece::Head(head));
                self.pieces.push(Piece::Tensor(i));
                return Ok(buf.len());
            }
        }
        self.head.extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl TransitionMsg {
    /// Every tensor of the observations, in one fixed order.
    fn tensors_mut(&mut self) -> impl Iterator<Item = &mut Tensor> {
        [&mut self.obs, &mut self.next_obs]
            .into_iter()
            .flatten()
            .flat_map(|o| {
                o.images
                    .tensors_mut()
                    .chain(o.depth.tensors_mut())
                    .chain(std::iter::once(&mut o.state))
            })
    }

    /// Encodes the message it consumes as [`WireParts`]: the bytes of [`encode`](crate::encode), with the
    /// data of every tensor of at least [`PART_MIN`] bytes moved in as a part of its own instead of copied
    /// (for three 96x96 RGB views, 83 KB not copied).
    pub fn encode_parts(mut self) -> Result<WireParts, WireError> {
        let big: Vec<(usize, usize)> = self
            .tensors_mut()
            .map(|t| t.data())
            .filter(|d| d.len() >= PART_MIN)
            .map(|d| (d.as_ptr() as usize, d.len()))
            .collect();
        let mut w = SplitWriter {
            big: &big,
            used: vec![false; big.len()],
            head: Vec::with_capacity(512 + 4 * self.action.len()),
            pieces: Vec::with_capacity(2 * big.len() + 1),
        };
        rmp_serde::encode::write_named(&mut w, &self).map_err(|e| WireError::Encode {
            kind: Self::KIND,
            source: std::sync::Arc::new(e),
        })?;
        let SplitWriter {
            head, mut pieces, ..
        } = w;
        pieces.push(Piece::Head(head));
        // The same tensors in the same order as `big`: `taken[i]` is the buffer at `big[i]`.
        let mut taken: Vec<Vec<u8>> = self
            .tensors_mut()
            .filter(|t| t.data().len() >= PART_MIN)
            .map(Tensor::take_data)
            .collect();
        let parts = pieces
            .into_iter()
            .map(|p| match p {
                Piece::Head(h) => h,
                Piece::Tensor(i) => std::mem::take(&mut taken[i]),
            })
            .filter(|p| !p.is_empty())
            .collect();
        Ok(WireParts { parts })
    }
}

#[cfg(test)]
#[path = "parts_tests.rs"]
mod tests;
