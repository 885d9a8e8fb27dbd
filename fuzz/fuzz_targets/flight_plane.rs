//! The Flight data plane's control messages: any bytes decode without panic, and what
//! decodes encodes back to the same message.
#![no_main]
use libfuzzer_sys::fuzz_target;
use wirespeed_flight::internal::Msg;

fuzz_target!(|data: &[u8]| {
    if let Ok(msg) = Msg::decode(data) {
        assert_eq!(Msg::decode(&msg.encode()).ok(), Some(msg));
    }
});
