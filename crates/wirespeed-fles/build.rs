// The Boost.Interprocess segment that FLESnet's consumers read (cpp/segment.cpp): Boost's
// headers only, from libboost-dev.
fn main() {
    println!("cargo:rerun-if-changed=cpp/segment.cpp");
    cc::Build::new().cpp(true).std("c++17").file("cpp/segment.cpp").warnings(true).compile("wsfles_segment");
    println!("cargo:rustc-link-lib=rt");
}
