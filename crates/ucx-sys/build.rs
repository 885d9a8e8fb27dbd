//! Generates bindings to the UCP API of the UCX found by pkg-config, as a table of functions
//! filled when the library is opened at run time (`load` in src/lib.rs) rather than linked.

use std::env;
use std::path::PathBuf;

/// The UCX functions bound.
const FUNCTIONS: &[&str] = &[
    "ucp_am_data_release",
    "ucp_am_recv_data_nbx",
    "ucp_am_send_nbx",
    "ucp_config_modify",
    "ucp_config_read",
    "ucp_config_release",
    "ucp_ep_close_nbx",
    "ucp_ep_create",
    "ucp_ep_flush_nbx",
    "ucp_ep_print_info",
    "ucp_ep_rkey_unpack",
    "ucp_get_nbx",
    "ucp_init_version",
    "ucp_mem_map",
    "ucp_mem_query",
    "ucp_mem_unmap",
    "ucp_put_nbx",
    "ucp_request_check_status",
    "ucp_request_free",
    "ucp_rkey_buffer_release",
    "ucp_rkey_destroy",
    "ucp_rkey_pack",
    "ucp_worker_arm",
    "ucp_worker_create",
    "ucp_worker_destroy",
    "ucp_worker_get_address",
    "ucp_worker_get_efd",
    "ucp_worker_progress",
    "ucp_worker_query",
    "ucp_worker_release_address",
    "ucp_worker_set_am_recv_handler",
    "ucs_status_string",
];

fn main() {
    println!("cargo:rerun-if-changed=wrapper.h");
    let ucx = pkg_config::Config::new()
        .atleast_version("1.13")
        .probe("ucx")
        .expect("UCX >= 1.13 with its pkg-config file (Debian: apt install libucx-dev)");
    let mut builder = bindgen::Builder::default()
        .header("wrapper.h")
        // Only what wirespeed calls: every one must resolve when the library loads.
        .allowlist_function(FUNCTIONS.join("|"))
        .allowlist_type("ucp_.*")
        .allowlist_type("ucs_status_t")
        .allowlist_var("UCP_.*")
        .allowlist_var("UCS_.*")
        .dynamic_library_name("Ucp")
        .dynamic_link_require_all(true)
        .wrap_unsafe_ops(true)
        .prepend_enum_name(false)
        .derive_default(true)
        .layout_tests(false)
        .parse_callbacks(Box::new(bindgen::CargoCallbacks::new()));
    for path in &ucx.include_paths {
        builder = builder.clang_arg(format!("-I{}", path.display()));
    }
    let out = PathBuf::from(env::var("OUT_DIR").unwrap()).join("bindings.rs");
    builder.generate().expect("generate UCX bindings").write_to_file(out).expect("write UCX bindings");
}
