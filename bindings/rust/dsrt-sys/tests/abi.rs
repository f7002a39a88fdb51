//! The declarations themselves come from include/dsrt.h through bindgen (src/bindings.rs, with
//! bindgen's own size/alignment/offset tests for every struct); `make test` checks that the
//! committed file is what the header generates. These tests cover what generation cannot: the
//! hand-written defaults, the library actually linked, and how build.rs found it.

#[test]
fn defaults_carry_the_struct_size() {
    use dsrt_sys::{dsrt_engine_options as O, dsrt_memory_stats as M, dsrt_step_result as S};
    use std::mem::size_of;
    assert_eq!((S::default().struct_size, size_of::<S>()), (48, 48));
    assert_eq!((M::default().struct_size, size_of::<M>()), (128, 128));
    let o = O::default();
    assert_eq!((o.struct_size, o.device_type, o.device_index), (16, dsrt_sys::DSRT_DEVICE_DEFAULT, -1));
    assert_eq!(M::default().buffers.len(), dsrt_sys::DSRT_NUM_LOCATIONS as usize);
}

#[test]
fn linked_library_matches_the_declared_version() {
    let v = unsafe { dsrt_sys::dsrt_version_number() };
    assert_eq!(v / 10000, dsrt_sys::DSRT_VERSION_MAJOR, "libdsrt major {} differs from dsrt-sys", v / 10000);
    let s = unsafe { std::ffi::CStr::from_ptr(dsrt_sys::dsrt_version_string()) };
    assert_eq!(s.to_str().unwrap(), format!("{}.{}.{}", v / 10000, v / 100 % 100, v % 100));
    let declared = std::ffi::CStr::from_bytes_with_nul(dsrt_sys::DSRT_VERSION_STRING).unwrap();
    assert_eq!(s, declared, "the header's DSRT_VERSION_STRING differs from the linked library's");
}

/// Every status the header declares is one the linked library knows, each with its own text.
#[test]
fn status_strings_cover_every_declared_status() {
    use dsrt_sys::*;
    let all = [DSRT_OK, DSRT_ERR_INVALID_ARGUMENT, DSRT_ERR_CONFIG, DSRT_ERR_STATE, DSRT_ERR_OUT_OF_MEMORY,
               DSRT_ERR_IO, DSRT_ERR_COMM, DSRT_ERR_DEVICE, DSRT_ERR_CHECKPOINT, DSRT_ERR_UNSUPPORTED,
               DSRT_ERR_INTERNAL];
    let text = |s: dsrt_status| unsafe { std::ffi::CStr::from_ptr(dsrt_status_string(s)) }.to_str().unwrap().to_string();
    let unknown = text(-12345);
    let mut seen = std::collections::BTreeSet::new();
    for s in all {
        let t = text(s);
        assert_ne!(t, unknown, "status {s} is declared in dsrt.h but unknown to the library");
        assert!(seen.insert(t.clone()), "status {s} shares its text '{t}' with another status");
    }
}

/// scripts/test-rust.sh sets DSRT_SYS_EXPECT_FOUND_BY to check which search route build.rs took.
#[test]
fn library_found_by_the_expected_route() {
    let found_by = env!("DSRT_SYS_FOUND_BY");
    println!("libdsrt found by: {found_by} in {}", env!("DSRT_SYS_LIB_DIR"));
    if let Ok(want) = std::env::var("DSRT_SYS_EXPECT_FOUND_BY") {
        assert!(found_by.contains(&want), "build.rs found libdsrt by '{found_by}', expected '{want}'");
    }
}
