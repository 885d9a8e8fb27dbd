//! FLESnet's `TimesliceShmWorkItem` (class version 1), the payload of each WORK_ITEM: a
//! Boost.Serialization binary archive (as `output::tsa` writes, Boost 1.74's layout) of the
//! segment's UUID and name, the timeslice descriptor, each component's handle (its offset in
//! the segment), the legacy descriptor handles (none: version 1 carries the descriptors
//! themselves), and each component's descriptor.

use crate::error::{Result, malformed};
use crate::model::TimesliceDescriptor;
use crate::output::tsa::write_header;
use crate::source::boost_in::ArchiveIn;

/// FLESnet's TimesliceComponentDescriptor (class version 1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ComponentEntry {
    /// The timeslice the component belongs to.
    pub ts_num: u64,
    /// Where the component lies in the segment.
    pub offset: u64,
    /// Its size in bytes.
    pub size: u64,
    /// How many microslices it holds.
    pub num_microslices: u64,
    /// FLESnet's component flags (missing, overflow).
    pub flags: u32,
}

/// FLESnet's TimesliceShmWorkItem: a timeslice in a shared-memory segment, as the item distributor hands it to consumers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkItem {
    /// The segment's UUID.
    pub shm_uuid: [u8; 16],
    /// The segment's name.
    pub shm_name: String,
    /// The timeslice's descriptor.
    pub descriptor: TimesliceDescriptor,
    /// Each component's offset in the segment (a Boost handle).
    pub data: Vec<i64>,
    /// Each component's descriptor.
    pub components: Vec<ComponentEntry>,
}

/// Items with more components are refused as garbage.
const MAX_COMPONENTS: u64 = 1 << 16;

impl WorkItem {
    /// The item as FLESnet's consumers read it (a Boost.Serialization binary archive).
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

    /// An item from FLESnet's encoding; a malformed one is an error.
    pub fn decode(b: &[u8]) -> Result<WorkItem> {
        let mut r = ArchiveIn::headed(b, "work item")?;
        let count = |r: &mut ArchiveIn<&[u8]>| match r.u64()? {
            n if n > MAX_COMPONENTS => Err(malformed("work item", format!("{n} components"))),
            n => Ok(n),
        };
        let version = r.class(ITEM)?;
        let shm_uuid = r.vec(16)?.try_into().expect("16 bytes");
        let shm_name = r.string()?;
        if r.class(DESCRIPTOR)? != 2 {
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
        let data = (0..count(&mut r)?).map(|_| r.u64().map(|h| h as i64)).collect::<Result<Vec<_>>>()?;
        for _ in 0..count(&mut r)? {
            r.u64()?; // legacy descriptor handles
        }
        let mut components = Vec::new();
        if version > 0 {
            r.class(COMPONENTS)?;
            let n = count(&mut r)?;
            r.u32()?; // item version: the first component's class says it again
            for _ in 0..n {
                let element_version = r.class(COMPONENT)?;
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

/// The item's classes, as they first appear.
const ITEM: usize = 0;
const DESCRIPTOR: usize = 1;
const COMPONENTS: usize = 2;
const COMPONENT: usize = 3;

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
