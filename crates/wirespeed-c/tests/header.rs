//! include/wirespeed.h is what cbindgen makes of the crate now: a stale header fails here.
//! `WIRESPEED_BLESS=1` writes it anew.

#[test]
fn the_checked_in_header_is_current() {
    let crate_dir = env!("CARGO_MANIFEST_DIR");
    let config = cbindgen::Config::from_file(format!("{crate_dir}/cbindgen.toml")).unwrap();
    let mut generated = Vec::new();
    cbindgen::generate_with_config(crate_dir, config).unwrap().write(&mut generated);
    let path = format!("{crate_dir}/include/wirespeed.h");
    if std::env::var_os("WIRESPEED_BLESS").is_some() {
        std::fs::write(&path, &generated).unwrap();
    }
    let checked_in = std::fs::read(&path).unwrap_or_default();
    assert!(
        checked_in == generated,
        "{path} is stale: run `WIRESPEED_BLESS=1 cargo test -p wirespeed-c --test header` and commit it"
    );
}
