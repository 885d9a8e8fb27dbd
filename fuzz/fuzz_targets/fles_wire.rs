//! Timeslice-building messages: any bytes decode without panic, and what decodes encodes back
//! to a message that decodes the same.
#![no_main]
use libfuzzer_sys::fuzz_target;
use wirespeed_fles::wire::Msg;

fuzz_target!(|data: &[u8]| {
    if let Ok(msg) = Msg::decode(data) {
        assert_eq!(Msg::decode(&msg.encode()).ok(), Some(msg));
    }
});
