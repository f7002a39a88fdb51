//! The safe API without training: versions, errors with codes and messages, configs, the life
//! cycle rules, borrow rules of tensor views, thread-safety markers, drop order.
#[path = "common/linear.rs"]
mod linear;

use dsrt::{Comm, Config, Engine, ErrorKind};

#[test]
fn version_and_status_strings() {
    dsrt::check_version().expect("the loaded library has this crate's major version");
    let v = dsrt::version_number();
    assert_eq!(dsrt::version_string(), format!("{}.{}.{}", v / 10000, v / 100 % 100, v % 100));
    assert_eq!(dsrt::status_string(1), "invalid argument");
    assert_eq!(dsrt::status_string(12345), "unknown status");
    assert!(!dsrt::has_feature("no-such-feature"));
    assert!(!dsrt::has_feature("nul\0inside"));
    let _ = dsrt::has_feature("avx2"); // either answer is valid; it must not fail
}

#[test]
fn config_errors_carry_code_and_message() {
    let e = Config::parse("{ \"train_micro_batch_size_per_gpu\": 1, ").err().expect("truncated JSON must fail");
    assert_eq!(e.kind(), ErrorKind::Config);
    assert_eq!(e.code(), 2);
    assert_eq!(e.function(), "dsrt_config_parse");
    assert!(!e.message().is_empty(), "a syntax error needs a message");
    let shown = e.to_string();
    assert!(shown.contains("dsrt_config_parse") && shown.contains(e.message()), "{shown}");

    let e = Config::parse(r#"{"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stagee": 2}}"#)
        .err()
        .expect("a misspelled key must fail");
    assert_eq!(e.kind(), ErrorKind::Config);
    assert!(e.message().contains("stagee"), "message names the bad key: {}", e.message());

    let e = Config::load("/nonexistent/dir/ds_config.json").err().expect("a missing file must fail");
    assert_eq!(e.kind(), ErrorKind::Io);
    assert!(e.message().contains("/nonexistent/dir/ds_config.json"), "{}", e.message());

    let e = Config::parse("{\"a\": \"nul\0\"}").err().expect("NUL in the text");
    assert_eq!(e.kind(), ErrorKind::InvalidArgument);
}

#[test]
fn config_values_and_auto_resolution() {
    let mut c = Config::parse(r#"{
        "train_micro_batch_size_per_gpu": 2,
        "optimizer": {"type": "Adam", "params": {"lr": 0.001}},
        "zero_optimization": {"stage": 3, "reduce_bucket_size": "auto", "stage3_prefetch_bucket_size": "auto",
                              "stage3_param_persistence_threshold": "auto"},
    }"#).expect("trailing commas are accepted");
    let unresolved = c.unresolved().unwrap();
    assert!(unresolved.iter().any(|k| k == "zero_optimization.reduce_bucket_size"), "{unresolved:?}");
    let e = Engine::new(&c, None).err().expect("an unresolved auto must fail engine creation");
    assert_eq!(e.kind(), ErrorKind::Config);
    c.set_hidden_size(64).unwrap();
    assert!(c.unresolved().unwrap().is_empty());
    assert_eq!(c.get_number("zero_optimization.reduce_bucket_size").unwrap(), 4096.0);
    assert_eq!(c.get_number("zero_optimization.stage3_param_persistence_threshold").unwrap(), 640.0);
    c.set_number("optimizer.params.lr", 0.25).unwrap();
    assert_eq!(c.get_number("optimizer.params.lr").unwrap(), 0.25);
    c.set_bool("zero_optimization.overlap_comm", true).unwrap();
    assert_eq!(c.get_number("zero_optimization.overlap_comm").unwrap(), 1.0);
    assert_eq!(c.get_string("optimizer.type").unwrap().to_lowercase(), "adam");
    let e = c.set_number("optimizer.params.no_such_param", 1.0).err().expect("unknown key");
    assert_eq!(e.kind(), ErrorKind::Config);
    let json = c.to_json().unwrap();
    assert!(json.contains("reduce_bucket_size") && json.contains("4096"), "{json}");
    let _warnings: Vec<String> = c.warnings().unwrap();
    let mut d: Config = json.parse().expect("the effective config parses again");
    d.set_world_size(1).unwrap();
}

#[test]
fn life_cycle_rules() {
    let config = Config::parse(&linear::config_json(2, 0.01, 4)).unwrap();
    let comm = Comm::local().unwrap();
    assert_eq!((comm.rank(), comm.world_size()), (0, 1));
    comm.barrier().unwrap();
    let engine = Engine::new(&config, Some(&comm)).unwrap();
    drop(comm); // the engine keeps its own reference
    drop(config); // the engine copied it

    let e = engine.add_param("w", &[2, 3], Some(&[1.0; 5])).err().expect("init length must match the shape");
    assert_eq!(e.kind(), ErrorKind::InvalidArgument);
    assert!(e.message().contains("6"), "{}", e.message());
    let e = engine.step().err().expect("step before build");
    assert_eq!(e.kind(), ErrorKind::State);

    let init: Vec<f32> = (0..6).map(|i| i as f32 * 0.5 - 1.0).collect();
    let w = engine.add_param("w", &[2, 3], Some(&init)).unwrap();
    assert!(engine.add_param("w", &[2], None).is_err(), "duplicate names are rejected");
    let b = engine.add_param("b", &[3], None).unwrap();
    engine.build().unwrap();
    let e = engine.add_param("late", &[1], None).err().expect("add_param after build");
    assert_eq!(e.kind(), ErrorKind::State);

    assert_eq!(engine.num_tensors(), 2);
    let names: Vec<String> = engine.tensors().iter().map(|t| t.name()).collect();
    assert_eq!(names, ["w", "b"]);
    assert_eq!((w.shape().unwrap(), w.ndim(), w.numel()), (vec![2, 3], 2, 6));
    assert!(engine.tensor(2).is_none());
    assert_eq!(w.read_fp32().unwrap(), init);
    assert_eq!(b.read_fp32().unwrap(), vec![0.0; 3]);
    let e = w.read_fp32_into(&mut [0.0; 5]).err().expect("wrong count");
    assert_eq!(e.kind(), ErrorKind::InvalidArgument);

    let data = w.acquire().unwrap();
    if let Some(values) = data.as_f32() {
        assert_eq!(values, &init[..], "the fp32 working copy equals the init values");
    }
    let e = engine.step().err().expect("step while a view is open");
    assert_eq!(e.kind(), ErrorKind::State);
    assert!(w.write_fp32(&init).is_err(), "write while a view of the tensor is open");
    drop(data);

    let g1 = w.grad().unwrap();
    let e = w.grad().err().expect("a second gradient view of the same tensor");
    assert_eq!(e.kind(), ErrorKind::State);
    let g2 = engine.tensor(0).unwrap().grad().err().expect("also through another handle");
    assert_eq!(g2.kind(), ErrorKind::State);
    g1.ready().unwrap();
    engine.step().unwrap();

    let newer: Vec<f32> = init.iter().map(|v| v * 2.0).collect();
    w.write_fp32(&newer).unwrap();
    assert_eq!(w.read_fp32().unwrap(), newer);
    let lr = engine.lr().unwrap();
    assert!(lr > 0.0 && lr <= 0.01 + 1e-12, "lr {lr}");
    assert_eq!(engine.loss_scale().unwrap(), 1.0, "fp32 training has loss scale 1");
    let m = engine.memory().unwrap();
    let working: u64 = m.working_params.iter().sum();
    assert!(working >= 9 * 4, "working copies of 9 fp32 values: {m:?}");
    engine.device().unwrap();
}

#[test]
fn frozen_params_keep_their_value_and_refuse_gradients() {
    let config = Config::parse(&linear::config_json(2, 0.01, 4)).unwrap();
    let engine = Engine::new(&config, None).unwrap();
    let base_init: Vec<f32> = (0..6).map(|i| i as f32 * 0.25 - 0.5).collect();
    let base = engine.add_frozen_param("base", &[2, 3], Some(&base_init)).unwrap();
    assert!(engine.add_param("base", &[1], None).is_err(), "the name is taken by the frozen tensor");
    let w = engine.add_param("w", &[3], Some(&[0.5, -0.5, 1.0])).unwrap();
    engine.build().unwrap();
    assert_eq!(engine.num_tensors(), 1, "frozen tensors are not listed with the trainable ones");
    assert_eq!((base.name(), base.shape().unwrap()), ("base".to_string(), vec![2, 3]));
    let e = base.grad().err().expect("a frozen tensor has no gradient");
    assert_eq!(e.kind(), ErrorKind::State);
    assert!(e.message().contains("'base'"), "{}", e.message());
    for _ in 0..3 {
        let mut g = w.grad().unwrap();
        if let Some(values) = g.as_f32_mut() {
            values.copy_from_slice(&[0.1, -0.2, 0.3]);
        }
        g.ready().unwrap();
        engine.step().unwrap();
    }
    assert_ne!(w.read_fp32().unwrap(), vec![0.5, -0.5, 1.0], "the trainable tensor moved");
    assert_eq!(base.read_fp32().unwrap(), base_init, "the frozen one did not");
    let data = base.acquire().unwrap();
    if let Some(values) = data.as_f32() {
        assert_eq!(values, &base_init[..]);
    }
}

#[test]
fn handles_are_send_but_not_sync() {
    fn send<T: Send>() {}
    send::<Engine>();
    send::<Config>();
    send::<Comm>();
    // Compiles only if T is not Sync (the call is ambiguous for Sync types).
    trait AmbiguousIfSync<A> {
        fn check() {}
    }
    impl<T: ?Sized> AmbiguousIfSync<()> for T {}
    struct IsSync;
    impl<T: ?Sized + Sync> AmbiguousIfSync<IsSync> for T {}
    <Engine as AmbiguousIfSync<_>>::check();
    <Config as AmbiguousIfSync<_>>::check();
    <Comm as AmbiguousIfSync<_>>::check();
    // An engine moves to another thread and trains there.
    let engine = Engine::new(&Config::parse(&linear::config_json(1, 0.01, 4)).unwrap(), None).unwrap();
    let handle = std::thread::spawn(move || {
        let t = engine.add_param("x", &[4], None).unwrap();
        let n = t.numel();
        engine.build().unwrap();
        n
    });
    assert_eq!(handle.join().unwrap(), 4);
}

#[test]
fn log_callback_can_be_set_and_cleared() {
    dsrt::set_log_callback(Some(Box::new(|level, msg| {
        assert!((0..=3).contains(&level), "level {level}: {msg}");
    })));
    let _ = Config::parse(r#"{"train_micro_batch_size_per_gpu": 1}"#).unwrap();
    dsrt::set_log_callback(None);
}
