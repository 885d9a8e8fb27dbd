//! Generates bindings to the libfabric found by pkg-config. The library's exported functions
//! become a table filled when it is opened at run time (`load` in src/lib.rs) rather than
//! linked; its static inline functions get symbols from `shim.c`, compiled here.

use std::env;
use std::path::PathBuf;

/// The exported libfabric functions bound.
const FUNCTIONS: &[&str] = &["fi_dupinfo", "fi_fabric", "fi_freeinfo", "fi_getinfo", "fi_strerror"];

fn main() {
    println!("cargo:rerun-if-changed=wrapper.h");
    println!("cargo:rerun-if-changed=shim.c");
    let ofi = pkg_config::Config::new()
        .atleast_version("1.17")
        .cargo_metadata(false) // opened at run time, not linked
        .probe("libfabric")
        .expect("libfabric >= 1.17 with its pkg-config file (Debian: apt install libfabric-dev)");
    let includes: Vec<String> = ofi.include_paths.iter().map(|p| format!("-I{}", p.display())).collect();
    let out = PathBuf::from(env::var("OUT_DIR").unwrap());

    let mut shim = cc::Build::new();
    shim.file("shim.c").include(".").warnings(true);
    for path in &ofi.include_paths {
        shim.include(path);
    }
    shim.compile("ofi_shim");

    let common = |b: bindgen::Builder| {
        b.clang_args(&includes)
            .wrap_unsafe_ops(true)
            .prepend_enum_name(false)
            .derive_default(true)
            .layout_tests(false)
            .parse_callbacks(Box::new(bindgen::CargoCallbacks::new()))
    };
    common(bindgen::Builder::default().header("wrapper.h"))
        // Only what wirespeed calls: every one must resolve when the library loads.
        .allowlist_function(FUNCTIONS.join("|"))
        .allowlist_type("fi_.*|fid.*")
        .allowlist_var("FI_.*")
        .dynamic_library_name("Fabric")
        .dynamic_link_require_all(true)
        .generate()
        .expect("generate libfabric bindings")
        .write_to_file(out.join("bindings.rs"))
        .expect("write libfabric bindings");
    // The shim's own functions, linked; the types they use come from the bindings above.
    common(bindgen::Builder::default().header("shim.c"))
        .allowlist_function("ws_fi_.*")
        .allowlist_recursively(false)
        .generate()
        .expect("generate shim bindings")
        .write_to_file(out.join("shim.rs"))
        .expect("write shim bindings");
}
