//! One little-endian codec for every wire format of the project (the frames' own, the file
//! protocol's, Flight's planes', libfabric's messages, FLESnet's): a [`Reader`] over bytes that
//! fails with [`Truncated`] when they run out, and a [`Writer`] that appends. Each format maps
//! `Truncated` into its own violation and adds its own rules (lengths, kinds) on top.

/// The bytes ended before a field did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("truncated")]
pub struct Truncated;

/// Reads fields off the front of a byte slice.
#[derive(Debug, Clone)]
pub struct Reader<'a> {
    rest: &'a [u8],
}

impl<'a> Reader<'a> {
    pub fn new(bytes: &'a [u8]) -> Self {
        Reader { rest: bytes }
    }

    /// What is left to read.
    pub fn rest(&self) -> &'a [u8] {
        self.rest
    }

    pub fn is_empty(&self) -> bool {
        self.rest.is_empty()
    }

    /// The next `N` bytes, as an array.
    pub fn array<const N: usize>(&mut self) -> Result<[u8; N], Truncated> {
        let (head, rest) = self.rest.split_first_chunk::<N>().ok_or(Truncated)?;
        self.rest = rest;
        Ok(*head)
    }

    /// The next `n` bytes.
    pub fn bytes(&mut self, n: usize) -> Result<&'a [u8], Truncated> {
        if n > self.rest.len() {
            return Err(Truncated);
        }
        let (head, rest) = self.rest.split_at(n);
        self.rest = rest;
        Ok(head)
    }

    /// Everything left, which the reader then holds no more of.
    pub fn take_rest(&mut self) -> &'a [u8] {
        std::mem::take(&mut self.rest)
    }

    pub fn u8(&mut self) -> Result<u8, Truncated> {
        Ok(self.array::<1>()?[0])
    }
    pub fn u16(&mut self) -> Result<u16, Truncated> {
        Ok(u16::from_le_bytes(self.array()?))
    }
    pub fn u32(&mut self) -> Result<u32, Truncated> {
        Ok(u32::from_le_bytes(self.array()?))
    }
    pub fn u64(&mut self) -> Result<u64, Truncated> {
        Ok(u64::from_le_bytes(self.array()?))
    }
    pub fn u128(&mut self) -> Result<u128, Truncated> {
        Ok(u128::from_le_bytes(self.array()?))
    }
    pub fn i32(&mut self) -> Result<i32, Truncated> {
        Ok(i32::from_le_bytes(self.array()?))
    }
    pub fn i64(&mut self) -> Result<i64, Truncated> {
        Ok(i64::from_le_bytes(self.array()?))
    }
}

/// Appends fields to a byte vector.
#[derive(Debug, Default, Clone)]
pub struct Writer(pub Vec<u8>);

impl Writer {
    pub fn with_capacity(n: usize) -> Self {
        Writer(Vec::with_capacity(n))
    }

    pub fn into_inner(self) -> Vec<u8> {
        self.0
    }

    pub fn bytes(&mut self, b: &[u8]) {
        self.0.extend_from_slice(b);
    }
    pub fn u8(&mut self, v: u8) {
        self.0.push(v);
    }
    pub fn u16(&mut self, v: u16) {
        self.bytes(&v.to_le_bytes());
    }
    pub fn u32(&mut self, v: u32) {
        self.bytes(&v.to_le_bytes());
    }
    pub fn u64(&mut self, v: u64) {
        self.bytes(&v.to_le_bytes());
    }
    pub fn u128(&mut self, v: u128) {
        self.bytes(&v.to_le_bytes());
    }
    pub fn i32(&mut self, v: i32) {
        self.bytes(&v.to_le_bytes());
    }
    pub fn i64(&mut self, v: i64) {
        self.bytes(&v.to_le_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn fields_read_back_as_written_and_a_short_read_is_truncated() {
        let mut w = Writer::default();
        w.u8(1);
        w.u16(2);
        w.u32(3);
        w.u64(4);
        w.i64(-5);
        w.u128(6);
        w.bytes(b"tail");
        let bytes = w.into_inner();
        let mut r = Reader::new(&bytes);
        assert_eq!((r.u8(), r.u16(), r.u32(), r.u64(), r.i64(), r.u128()), (Ok(1), Ok(2), Ok(3), Ok(4), Ok(-5), Ok(6)));
        assert_eq!(r.bytes(5), Err(Truncated));
        assert_eq!(r.rest(), b"tail", "a failed read takes nothing");
        assert_eq!(r.take_rest(), b"tail");
        assert!(r.is_empty());
        assert_eq!(r.u8(), Err(Truncated));
    }

    proptest! {
        /// Whatever the bytes, reading never panics and never reads past them.
        #[test]
        fn any_bytes_read_or_truncate(bytes in proptest::collection::vec(any::<u8>(), 0..40), n in 0usize..48) {
            let mut r = Reader::new(&bytes);
            let _ = r.u64();
            let before = r.rest().len();
            match r.bytes(n) {
                Ok(b) => prop_assert_eq!(b.len(), n),
                Err(Truncated) => prop_assert_eq!(r.rest().len(), before),
            }
        }
    }
}
