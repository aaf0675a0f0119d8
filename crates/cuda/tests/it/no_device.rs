//! Without a driver or a device every entry point is an [`Error`] that names what is
//! missing, never a panic (cudarc panics when libcuda is absent: gguf-cuda probes first).
//! On a machine with a device, the out-of-range ordinal is checked instead.

use gguf_cuda::{probe, Device, Error};

#[test]
fn no_driver_or_no_device_is_a_named_error() {
    match probe::driver_library() {
        Err(Error::DriverNotFound { tried }) => {
            assert_eq!(tried, probe::driver_candidates());
            for r in [Device::count().map(|_| ()), Device::open(0).map(|_| ())] {
                let e = r.expect_err("no driver");
                assert!(matches!(e, Error::DriverNotFound { .. }), "{e:?}");
                let s = e.to_string();
                assert!(
                    s.starts_with("no CUDA driver: libcuda.so.1 not found (tried libcuda.so.1, libcuda.so)")
                        || cfg!(windows),
                    "{s}"
                );
            }
            eprintln!("no driver here: {}", Device::open(0).unwrap_err());
        }
        Ok(lib) => match Device::count() {
            Err(e) => {
                assert!(matches!(e, Error::NoDevice { .. }), "{e:?}");
                assert!(e.to_string().contains(&lib), "{e}");
                assert!(matches!(Device::open(0), Err(Error::NoDevice { .. })));
            }
            Ok(n) => match Device::open(n + 3) {
                Err(Error::BadOrdinal { ordinal, count }) => assert_eq!((ordinal, count), (n + 3, n)),
                other => panic!("{other:?}"),
            },
        },
        Err(e) => panic!("{e:?}"),
    }
}

#[test]
fn messages_name_the_missing_piece() {
    let e = Error::NoDevice { library: "libcuda.so.1".into(), detail: "CUDA_ERROR_NO_DEVICE".into() };
    assert_eq!(e.to_string(), "CUDA driver found (libcuda.so.1) but no CUDA device: CUDA_ERROR_NO_DEVICE");
    let e = Error::BadOrdinal { ordinal: 2, count: 1 };
    assert_eq!(e.to_string(), "CUDA device 2 requested but only 1 device(s) present");
    let e = Error::NvrtcNotFound { tried: vec!["libnvrtc.so.12".into()] };
    assert!(
        e.to_string()
            .starts_with("NVRTC (the CUDA runtime compiler) not found: tried libnvrtc.so.12; set GGUF_NVRTC_LIB"),
        "{e}"
    );
}

#[test]
fn nvrtc_from_a_bad_path_is_not_found_and_names_it() {
    // GGUF_NVRTC_LIB is read by Nvrtc::open; a path that does not load is reported among
    // the candidates (the system names follow it, so only check it is listed first).
    let c = gguf_cuda::nvrtc::candidates();
    assert!(c.iter().any(|p| p.ends_with("libnvrtc.so.12")), "{c:?}");
}
