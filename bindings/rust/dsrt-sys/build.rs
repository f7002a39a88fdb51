//! Finds libdsrt and its header, in this order:
//!   1. DSRT_DIR: an install prefix (DSRT_DIR/lib*/libdsrt.so, DSRT_DIR/include/dsrt.h) or a
//!      CMake build folder (DSRT_DIR/lib/libdsrt.so, header from the source tree);
//!   2. pkg-config (`pkg-config dsrt`, i.e. an installed dsrt.pc on PKG_CONFIG_PATH);
//!   3. the repository's own build/ folder (../../../build relative to this crate).
//! An explicit DSRT_DIR that does not hold the library is an error (no silent fallback). When
//! nothing is found, the error lists every place tried and why it was rejected.
//!
//! Exported to dependents (links = "dsrt"): DEP_DSRT_LIBDIR and DEP_DSRT_INCLUDE.
use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The header major src/bindings.rs was generated from (its DSRT_VERSION_MAJOR).
fn declared_major() -> u32 {
    let path = PathBuf::from(env::var("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR")).join("src/bindings.rs");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| fail(format!("dsrt-sys: reading {}: {e}", path.display())));
    text.lines()
        .find_map(|l| l.strip_prefix("pub const DSRT_VERSION_MAJOR: i32 = "))
        .and_then(|v| v.trim_end_matches(';').parse().ok())
        .unwrap_or_else(|| fail(format!("dsrt-sys: {} declares no DSRT_VERSION_MAJOR; run scripts/gen-bindings.sh", path.display())))
}

struct Found {
    lib_dir: PathBuf,
    include_dir: PathBuf,
    how: String,
}

fn repo_root() -> PathBuf {
    let manifest = PathBuf::from(env::var("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR"));
    let root = manifest.join("..").join("..").join("..");
    std::fs::canonicalize(&root).unwrap_or(root)
}

fn has_lib(dir: &Path) -> bool {
    dir.join("libdsrt.so").exists()
}

fn from_dsrt_dir(dir: &Path, tried: &mut Vec<String>) -> Option<Found> {
    let lib_candidates = [dir.join("lib"), dir.join("lib64"), dir.join("lib/x86_64-linux-gnu"),
                          dir.join("lib/aarch64-linux-gnu"), dir.to_path_buf()];
    let lib_dir = lib_candidates.iter().find(|d| has_lib(d)).cloned();
    let include_candidates = [dir.join("include"), repo_root().join("include")];
    let include_dir = include_candidates.iter().find(|d| d.join("dsrt.h").exists()).cloned();
    match (lib_dir, include_dir) {
        (Some(lib_dir), Some(include_dir)) => Some(Found { lib_dir, include_dir, how: format!("DSRT_DIR={}", dir.display()) }),
        (None, _) => {
            tried.push(format!(
                "DSRT_DIR={}: no libdsrt.so in {}",
                dir.display(),
                lib_candidates.iter().map(|d| d.display().to_string()).collect::<Vec<_>>().join(", ")
            ));
            None
        }
        (_, None) => {
            tried.push(format!("DSRT_DIR={}: no dsrt.h in {}/include or the source tree", dir.display(), dir.display()));
            None
        }
    }
}

fn from_pkg_config(tried: &mut Vec<String>) -> Option<Found> {
    let out = Command::new(env::var("PKG_CONFIG").unwrap_or_else(|_| "pkg-config".into()))
        .args(["--libs-only-L", "--cflags-only-I", "dsrt"])
        .output();
    let out = match out {
        Ok(o) => o,
        Err(e) => {
            tried.push(format!("pkg-config: could not run it ({e})"));
            return None;
        }
    };
    if !out.status.success() {
        tried.push(format!("pkg-config dsrt: {}", String::from_utf8_lossy(&out.stderr).trim()));
        return None;
    }
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let mut lib_dir = None;
    let mut include_dir = None;
    for flag in text.split_whitespace() {
        if let Some(d) = flag.strip_prefix("-L") {
            lib_dir.get_or_insert_with(|| PathBuf::from(d));
        } else if let Some(d) = flag.strip_prefix("-I") {
            include_dir.get_or_insert_with(|| PathBuf::from(d));
        }
    }
    match (lib_dir, include_dir) {
        (Some(l), Some(i)) if has_lib(&l) && i.join("dsrt.h").exists() => {
            Some(Found { lib_dir: l, include_dir: i, how: "pkg-config dsrt".into() })
        }
        _ => {
            tried.push(format!("pkg-config dsrt gave '{}' but libdsrt.so/dsrt.h are not there", text.trim()));
            None
        }
    }
}

fn from_repo_build(tried: &mut Vec<String>) -> Option<Found> {
    let root = repo_root();
    let lib_dir = root.join("build").join("lib");
    if has_lib(&lib_dir) && root.join("include/dsrt.h").exists() {
        return Some(Found { lib_dir, include_dir: root.join("include"), how: "the repository's build/ folder".into() });
    }
    tried.push(format!("repository build folder: no libdsrt.so in {} (run `make build`)", lib_dir.display()));
    None
}

/// Stops the build with a message (no panic backtrace: the message is the whole story).
fn fail(message: String) -> ! {
    eprintln!("{message}");
    println!("cargo:warning={}", message.lines().next().unwrap_or("dsrt-sys: failed"));
    std::process::exit(1);
}

fn header_major(include_dir: &Path) -> Option<u32> {
    let text = std::fs::read_to_string(include_dir.join("dsrt.h")).ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix("#define DSRT_VERSION_MAJOR "))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
}

fn main() {
    println!("cargo:rerun-if-env-changed=DSRT_DIR");
    println!("cargo:rerun-if-env-changed=PKG_CONFIG_PATH");
    println!("cargo:rerun-if-env-changed=PKG_CONFIG");
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=src/bindings.rs");
    let declared = declared_major();

    let mut tried = Vec::new();
    let found = match env::var_os("DSRT_DIR") {
        Some(dir) if !dir.is_empty() => {
            let found = from_dsrt_dir(Path::new(&dir), &mut tried);
            if found.is_none() {
                fail(format!("dsrt-sys: DSRT_DIR is set but unusable:\n  - {}\n\
                        Point DSRT_DIR at an install prefix (make install PREFIX=...) or a CMake build folder.",
                       tried.join("\n  - ")));
            }
            found
        }
        _ => {
            tried.push("DSRT_DIR: not set".into());
            from_pkg_config(&mut tried).or_else(|| from_repo_build(&mut tried))
        }
    };
    let found = found.unwrap_or_else(|| {
        fail(format!("dsrt-sys: libdsrt not found. Tried, in order:\n  - {}\n\
                Fix: set DSRT_DIR to an install prefix or build folder, or add the folder holding dsrt.pc \
                to PKG_CONFIG_PATH.", tried.join("\n  - ")))
    });

    let header = found.include_dir.join("dsrt.h");
    println!("cargo:rerun-if-changed={}", header.display());
    match header_major(&found.include_dir) {
        Some(m) if m == declared => {}
        Some(m) => fail(format!("dsrt-sys: {} is major version {m}, but these declarations are for major \
                           {declared}; use a matching dsrt-sys", header.display())),
        None => fail(format!("dsrt-sys: {} has no DSRT_VERSION_MAJOR", header.display())),
    }

    println!("cargo:rustc-link-search=native={}", found.lib_dir.display());
    println!("cargo:rustc-link-lib=dylib=dsrt");
    // Lets this crate's own tests run without LD_LIBRARY_PATH; dependents read DEP_DSRT_LIBDIR.
    println!("cargo:rustc-link-arg=-Wl,-rpath,{}", found.lib_dir.display());
    println!("cargo:rustc-env=DSRT_SYS_INCLUDE_DIR={}", found.include_dir.display());
    println!("cargo:rustc-env=DSRT_SYS_LIB_DIR={}", found.lib_dir.display());
    println!("cargo:rustc-env=DSRT_SYS_FOUND_BY={}", found.how);
    println!("cargo:libdir={}", found.lib_dir.display());
    println!("cargo:include={}", found.include_dir.display());
}
