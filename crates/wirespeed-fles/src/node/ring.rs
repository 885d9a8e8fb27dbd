//! A compute node's rings for one input, as positions that only grow: a data ring of
//! `data` bytes and a descriptor ring of `descs` entries. A component never wraps: one that
//! would cross the data ring's end starts at the next turn instead, so every component is one
//! contiguous view, and the skipped tail counts as used until the component is acknowledged.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RingSizes {
    pub data: u64,
    pub descs: u64,
}

/// Where the writer is and what the reader has given back, in positions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Pointers {
    pub data: u64,
    pub desc: u64,
}

impl RingSizes {
    /// Where a component of `size` bytes goes after `written`, without wrapping.
    pub fn place(&self, written: u64, size: u64) -> u64 {
        let at = written % self.data;
        if at + size > self.data { written + (self.data - at) } else { written }
    }

    /// Where the next component of `size` goes if it fits beside what is not yet acknowledged.
    pub fn room(&self, written: Pointers, acked: Pointers, size: u64) -> Option<u64> {
        let at = self.place(written.data, size);
        let fits = at + size - acked.data <= self.data && written.desc - acked.desc < self.descs;
        fits.then_some(at)
    }

    /// Checks a component a writer claims at `offset` of `size`, after `written` with the
    /// reader at `acked`: it must follow what came before, not wrap, and fit.
    pub fn check(&self, written: u64, acked: u64, offset: u64, size: u64) -> std::result::Result<(), String> {
        let ok = offset >= written
            && size <= self.data
            && offset % self.data + size <= self.data
            && offset.checked_add(size).is_some_and(|end| end - acked <= self.data);
        match ok {
            true => Ok(()),
            false => Err(format!(
                "a component at {offset} of {size} bytes does not fit a {}-byte ring written to {written}, acknowledged to {acked}",
                self.data
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn components_skip_the_tail_rather_than_wrap() {
        let r = RingSizes { data: 100, descs: 4 };
        assert_eq!(r.place(0, 60), 0);
        assert_eq!(r.place(60, 30), 60);
        assert_eq!(r.place(60, 50), 100);
        let none = Pointers::default();
        assert_eq!(r.room(Pointers { data: 60, desc: 1 }, none, 40), Some(60));
        assert_eq!(r.room(Pointers { data: 60, desc: 1 }, none, 41), None, "it would need the skipped tail");
        assert_eq!(r.room(Pointers { data: 60, desc: 1 }, Pointers { data: 60, desc: 1 }, 41), Some(100));
        assert_eq!(r.room(Pointers { data: 10, desc: 4 }, none, 1), None, "descriptor ring full");
    }

    #[test]
    fn claims_are_checked() {
        let r = RingSizes { data: 100, descs: 4 };
        r.check(0, 0, 0, 100).unwrap();
        assert!(r.check(50, 0, 40, 10).is_err(), "backwards");
        assert!(r.check(50, 0, 90, 20).is_err(), "wraps");
        assert!(r.check(50, 0, 100, 60).is_err(), "overwrites what is not acknowledged");
        r.check(50, 60, 100, 60).unwrap();
        assert!(r.check(0, 0, u64::MAX - 5, 10).is_err());
    }
}
