//! Timeslice archives (.tsa) to replay, and components as compute nodes view them: any bytes
//! are read without panic, and every timeslice read has components whose views check out.
#![no_main]
use libfuzzer_sys::fuzz_target;
use wirespeed_fles::model::ComponentView;
use wirespeed_fles::source::TsaReader;

fuzz_target!(|data: &[u8]| {
    if let Ok(view) = ComponentView::new(data, u64::from(data.first().copied().unwrap_or(0) % 8)) {
        let _ = view.verify(0);
    }
    let Ok(mut reader) = TsaReader::new(data) else { return };
    while let Ok(Some(ts)) = reader.next_timeslice() {
        for (bytes, count) in &ts.components {
            assert!(ComponentView::new(bytes, *count).is_ok());
        }
    }
});
