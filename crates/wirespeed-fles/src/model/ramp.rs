//! FLESnet's software test pattern ("BasicRampPattern", what its pattern generators write and
//! tsclient's `FlesnetPatternChecker` accepts), written from its rule: subsystem FLES (0xF0),
//! format 0x81, equipment 0xE001, no flags; the content is 64-bit little-endian words, word k of
//! a microslice being (channel << 48) | 8k, and the descriptor's `crc` is not a CRC but the XOR
//! of every word's two 32-bit halves.

use crate::error::{FlesError, Result};

/// The subsystem id of FLESnet's ramp pattern.
pub const SYS_ID: u8 = 0xF0;
/// Its format version.
pub const SYS_VER: u8 = 0x81;
/// The equipment id FLESnet's pattern generator gives.
pub const EQ_ID: u16 = 0xE001;

/// Content sizes are whole words.
pub fn size(bytes: u32) -> u32 {
    bytes & !7
}

/// Fills `out` (a whole number of words) with channel `channel`'s ramp; returns its "crc".
pub fn fill(channel: u16, out: &mut [u8]) -> u32 {
    let mut crc = 0u32;
    for (k, word) in out.chunks_exact_mut(8).enumerate() {
        let w = (u64::from(channel) << 48) | (8 * k as u64);
        word.copy_from_slice(&w.to_le_bytes());
        crc ^= (w as u32) ^ ((w >> 32) as u32);
    }
    crc
}

/// Checks a microslice's content against the ramp, its channel taken from its first word as
/// FLESnet's checker does (`channel`, once known, must stay the same).
pub fn check(content: &[u8], crc: u32, channel: &mut Option<u16>, idx: u64) -> Result<()> {
    let bad = |why: String| FlesError::Pattern { idx, why };
    if !content.len().is_multiple_of(8) {
        return Err(bad(format!("{} bytes, not whole words", content.len())));
    }
    let mut found = 0u32;
    for (k, word) in content.chunks_exact(8).enumerate() {
        let w = u64::from_le_bytes(word.try_into().expect("8 bytes"));
        let ch = *channel.get_or_insert((w >> 48) as u16);
        let expected = (u64::from(ch) << 48) | (8 * k as u64);
        if w != expected {
            return Err(bad(format!("word {k} is {w:#018x}, the ramp says {expected:#018x}")));
        }
        found ^= (w as u32) ^ ((w >> 32) as u32);
    }
    match found == crc {
        true => Ok(()),
        false => Err(bad(format!("the words' XOR is {found:#010x}, the descriptor says {crc:#010x}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// By hand: channel 3, 24 bytes: words 0x0003_0000_0000_0000, ..._0008, ..._0010; the
    /// halves XOR to 0x0 ^ 0x8 ^ 0x10 for the low ones and 0x30000 three times for the high.
    #[test]
    fn the_ramp_by_hand() {
        let mut b = [0u8; 24];
        let crc = fill(3, &mut b);
        assert_eq!(&b[..8], &[0, 0, 0, 0, 0, 0, 3, 0]);
        assert_eq!(&b[8..16], &[8, 0, 0, 0, 0, 0, 3, 0]);
        assert_eq!(crc, 0x18 ^ 0x30000);
        let mut channel = None;
        check(&b, crc, &mut channel, 0).unwrap();
        assert_eq!(channel, Some(3));
        assert_eq!(size(1001), 1000);
    }

    #[test]
    fn departures_from_the_ramp_are_found() {
        let mut b = [0u8; 32];
        let crc = fill(1, &mut b);
        assert!(check(&b, crc ^ 1, &mut None, 0).is_err(), "crc");
        assert!(check(&b[..31], crc, &mut None, 0).is_err(), "partial word");
        assert!(check(&b, crc, &mut Some(2), 0).is_err(), "another channel");
        b[17] ^= 1;
        assert!(check(&b, crc, &mut None, 0).is_err(), "a flipped bit");
    }
}
