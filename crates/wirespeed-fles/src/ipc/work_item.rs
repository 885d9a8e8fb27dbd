//! FLESnet's `TimesliceShmWorkItem` (class version 1), the payload of each WORK_ITEM: a
//! Boost.Serialization binary archive (as `output::tsa` writes, Boost 1.74's layout) of the
//! segment's UUID and name, the timeslice descriptor, each component's handle (its offset in
//! the segment), the legacy descriptor handles (none: version 1 carries the descriptors
//! themselves), and each component's descriptor.

use crate::error::{Result, malformed};
use crate::model::TimesliceDescriptor;
use crate::output::tsa::{MAGIC, write_header};

/// FLESnet's TimesliceComponentDescriptor (class version 1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ComponentEntry {
    pub ts_num: u64,
    pub offset: u64,
    pub size: u64,
    pub num_microslices: u64,
    pub flags: u32,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkItem {
    pub shm_uuid: [u8; 16],
    pub shm_name: String,
    pub descriptor: TimesliceDescriptor,
    /// Each component's offset in the segment (a Boost handle).
    pub data: Vec<i64>,
    pub components: Vec<ComponentEntry>,
}

/// Items with more components are refused as garbage.
const MAX_COMPONENTS: u64 = 1 << 16;

impl WorkItem {
    pub fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(200 + self.components.len() * 48);
        write_header(&mut b).expect("writing to a Vec");
        // Each class's tracking byte and version, the first time it appears.
        let class = |b: &mut Vec<u8>, version: u32| {
            b.push(0);
            b.extend_from_slice(&version.to_le_bytes());
        };
        class(&mut b, 1); // TimesliceShmWorkItem
        b.extend_from_slice(&self.shm_uuid);
        b.extend_from_slice(&(self.shm_name.len() as u64).to_le_bytes());
        b.extend_from_slice(self.shm_name.as_bytes());
        class(&mut b, 2);
        b.extend_from_slice(&self.descriptor.encode());
        // Vectors of numbers are bare (Boost's array optimisation): data, then the empty desc.
        b.extend_from_slice(&(self.data.len() as u64).to_le_bytes());
        for h in &self.data {
            b.extend_from_slice(&h.to_le_bytes());
        }
        b.extend_from_slice(&0u64.to_le_bytes());
        class(&mut b, 0); // vector<TimesliceComponentDescriptor>
        b.extend_from_slice(&(self.components.len() as u64).to_le_bytes());
        b.extend_from_slice(&1u32.to_le_bytes()); // item version
        for (i, c) in self.components.iter().enumerate() {
            if i == 0 {
                class(&mut b, 1);
            }
            for v in [c.ts_num, c.offset, c.size, c.num_microslices] {
                b.extend_from_slice(&v.to_le_bytes());
            }
            b.extend_from_slice(&c.flags.to_le_bytes());
        }
        b
    }

    pub fn decode(b: &[u8]) -> Result<WorkItem> {
        let mut r = Reader { b, at: 0 };
        if r.take(8)? != (MAGIC.len() as u64).to_le_bytes() || r.take(22)? != MAGIC {
            return Err(malformed("work item", "not a Boost.Serialization binary archive"));
        }
        r.take(2)?; // library version
        if r.take(4)? != [4, 8, 4, 8] {
            return Err(malformed("work item", "written on a platform with other type sizes"));
        }
        r.take(4)?;
        let version = r.class()?;
        let shm_uuid = r.take(16)?.try_into().expect("16 bytes");
        let name_len = r.u64()?;
        if name_len > 4096 {
            return Err(malformed("work item", format!("a {name_len}-byte segment name")));
        }
        let shm_name = String::from_utf8_lossy(r.take(name_len as usize)?).into_owned();
        if r.class()? != 2 {
            return Err(malformed("work item", "a timeslice descriptor of another version than 2"));
        }
        let descriptor = TimesliceDescriptor {
            index: r.u64()?,
            start_time: r.u64()?,
            duration: r.u64()?,
            flags: r.u32()?,
            ts_pos: r.u64()?,
            num_core_microslices: r.u32()?,
            num_components: r.u32()?,
        };
        let data = (0..r.count()?).map(|_| r.u64().map(|h| h as i64)).collect::<Result<Vec<_>>>()?;
        for _ in 0..r.count()? {
            r.u64()?; // legacy descriptor handles
        }
        let mut components = Vec::new();
        if version > 0 {
            r.class()?;
            let count = r.count()?;
            let item_version = r.u32()?;
            for i in 0..count {
                let element_version = if i == 0 { r.class()? } else { item_version };
                components.push(ComponentEntry {
                    ts_num: r.u64()?,
                    offset: r.u64()?,
                    size: r.u64()?,
                    num_microslices: r.u64()?,
                    flags: if element_version > 0 { r.u32()? } else { 0 },
                });
            }
        }
        if data.len() != descriptor.num_components as usize || components.len() != data.len() {
            return Err(malformed("work item", "its component counts disagree"));
        }
        Ok(WorkItem { shm_uuid, shm_name, descriptor, data, components })
    }
}

struct Reader<'a> {
    b: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        let end = self.at.checked_add(n).filter(|&e| e <= self.b.len());
        let end = end.ok_or_else(|| malformed("work item", "it ends early"))?;
        let s = &self.b[self.at..end];
        self.at = end;
        Ok(s)
    }
    fn u32(&mut self) -> Result<u32> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().expect("4 bytes")))
    }
    fn u64(&mut self) -> Result<u64> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().expect("8 bytes")))
    }
    fn class(&mut self) -> Result<u32> {
        self.take(1)?;
        self.u32()
    }
    fn count(&mut self) -> Result<u64> {
        let n = self.u64()?;
        if n > MAX_COMPONENTS {
            return Err(malformed("work item", format!("{n} components")));
        }
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn example() -> WorkItem {
        let entry = |i: u64| ComponentEntry { ts_num: 7, offset: 0, size: 100 + i, num_microslices: 3, flags: 0 };
        WorkItem {
            shm_uuid: *b"0123456789abcdef",
            shm_name: "fles_out".into(),
            descriptor: TimesliceDescriptor {
                index: 7,
                ts_pos: 3,
                num_core_microslices: 2,
                num_components: 2,
                ..Default::default()
            },
            data: vec![4096, 8192],
            components: vec![entry(0), entry(1)],
        }
    }

    #[test]
    fn round_trips() {
        let item = example();
        assert_eq!(WorkItem::decode(&item.encode()).unwrap(), item);
    }

    /// Test vector: what Boost 1.74's binary_oarchive writes for `example()` with FLESnet's
    /// class (a throwaway program with tests/boost/fles_classes.hpp).
    #[test]
    fn boost_writes_the_same() {
        const BOOST: &str = "160000000000000073657269616c697a6174696f6e3a3a61726368697665120004080408010000000001000000303132333435363738396162636465660800000000000000666c65735f6f757400020000000700000000000000000000000000000000000000000000000000000003000000000000000200000002000000020000000000000000100000000000000020000000000000000000000000000000000000000200000000000000010000000001000000070000000000000000000000000000006400000000000000030000000000000000000000070000000000000000000000000000006500000000000000030000000000000000000000";
        let hex: String = example().encode().iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(hex, BOOST);
    }

    proptest! {
        #[test]
        fn garbage_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..400)) {
            let _ = WorkItem::decode(&bytes);
        }

        #[test]
        fn truncations_are_errors(cut in 0usize..230) {
            let b = example().encode();
            prop_assume!(cut < b.len());
            prop_assert!(WorkItem::decode(&b[..cut]).is_err());
        }
    }
}
