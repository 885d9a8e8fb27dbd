//! Generates bindings to the SimGrid found by pkg-config. Its C API's functions become a table
//! filled when the library is opened at run time (`load` in src/lib.rs) rather than linked, so
//! the binary runs on hosts without SimGrid.

use std::env;
use std::path::PathBuf;

/// The C API's functions bound: engine, actors, mailboxes, communications, hosts, links.
const FUNCTIONS: &[&str] = &[
    "simgrid_init",
    "simgrid_load_platform",
    "simgrid_run",
    "simgrid_run_until",
    "simgrid_get_clock",
    "sg_config_continue_after_help",
    "sg_actor_init",
    "sg_actor_start_",
    "sg_actor_self_get_data",
    "sg_actor_set_data",
    "sg_actor_sleep_for",
    "sg_actor_sleep_until",
    "sg_actor_kill",
    "sg_mailbox_by_name",
    "sg_mailbox_put_async",
    "sg_mailbox_put_init",
    "sg_mailbox_set_receiver",
    "sg_mailbox_put",
    "sg_mailbox_get_async",
    "sg_mailbox_get",
    "sg_mailbox_listen",
    "sg_comm_test",
    "sg_comm_wait",
    "sg_comm_wait_for",
    "sg_comm_wait_any_for",
    "sg_comm_wait_all_for",
    "sg_comm_unref",
    "sg_host_by_name",
    "sg_host_count",
    "sg_host_list",
    "sg_host_get_name",
    "sg_host_turn_on",
    "sg_host_turn_off",
    "sg_host_is_on",
    "sg_link_by_name",
    "sg_link_get_bandwidth",
    "sg_link_set_bandwidth",
    "sg_link_get_latency",
    "sg_link_get_name",
    "sg_link_count",
    "sg_link_list",
    "sg_version_get",
];

fn main() {
    println!("cargo:rerun-if-changed=wrapper.h");
    let simgrid = pkg_config::Config::new()
        .atleast_version("3.32")
        .cargo_metadata(false) // opened at run time, not linked
        .probe("simgrid")
        .expect("SimGrid >= 3.32 with its pkg-config file (Debian: apt install libsimgrid-dev)");
    let includes: Vec<String> = simgrid.include_paths.iter().map(|p| format!("-I{}", p.display())).collect();
    let out = PathBuf::from(env::var("OUT_DIR").unwrap());
    bindgen::Builder::default()
        .header("wrapper.h")
        .clang_args(&includes)
        .clang_arg("-xc")
        .wrap_unsafe_ops(true)
        .prepend_enum_name(false)
        .layout_tests(false)
        .parse_callbacks(Box::new(bindgen::CargoCallbacks::new()))
        // Only what wirespeed calls: every one must resolve when the library loads.
        .allowlist_function(FUNCTIONS.join("|"))
        .allowlist_type("sg_.*|s4u_.*|xbt_main_func_t")
        .allowlist_var("SG_.*|SIMGRID_VERSION_.*")
        .dynamic_library_name("SimGrid")
        .dynamic_link_require_all(true)
        .generate()
        .expect("generate SimGrid bindings")
        .write_to_file(out.join("bindings.rs"))
        .expect("write SimGrid bindings");
}
