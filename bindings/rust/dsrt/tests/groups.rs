//! Parameter groups, host-driven learning rates and host-driven accumulation boundaries through
//! the safe API, against a float64 SGD computed here: w -= lr_g(step) * (mean gradient).
use dsrt::{Config, Device, DeviceType, Engine};

/// No clipping (DeepSpeed's default clips at 1.0): the reference below is plain SGD, on gradients
/// whose norm is above 1.
fn config(stage: i32, gas: i32) -> Config {
    Config::parse(&format!(
        r#"{{"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": {gas}, "gradient_clipping": 0,
            "optimizer": {{"type": "SGD", "params": {{"lr": 0.1}}}},
            "zero_optimization": {{"stage": {stage}}}}}"#
    ))
    .unwrap()
}

fn grad_of(step: usize, micro: usize, tensor: usize, i: usize) -> f32 {
    ((step * 7 + micro * 3 + tensor * 5 + i) % 11) as f32 * 0.25 - 1.2
}

#[test]
fn groups_follow_host_learning_rates_at_every_stage() {
    for stage in 0..4 {
        let engine = Engine::new(&config(stage, 1), None).unwrap();
        let w = engine.add_param("w", &[3, 5], Some(&[0.5; 15])).unwrap();
        let b = engine.add_param("b", &[5], Some(&[-0.25; 5])).unwrap();
        let g = engine.add_group().unwrap();
        assert_eq!((g, engine.num_groups()), (1, 2));
        b.set_group(g).unwrap();
        assert_eq!((w.group(), b.group()), (0, 1));
        engine.build().unwrap();
        let mut expect = [vec![0.5f64; 15], vec![-0.25f64; 5]];
        for step in 0..6 {
            let lrs = [0.1 / (1.0 + step as f64), 0.03 * (step % 3) as f64];
            engine.set_group_hyper(0, "lr", lrs[0]).unwrap();
            engine.set_group_hyper(1, "lr", lrs[1]).unwrap();
            for (k, t) in [w, b].iter().enumerate() {
                let mut view = t.grad().unwrap();
                for (i, v) in view.as_f32_mut().unwrap().iter_mut().enumerate() {
                    *v = grad_of(step, 0, k, i);
                    expect[k][i] -= lrs[k] * grad_of(step, 0, k, i) as f64;
                }
                view.ready().unwrap();
            }
            let r = engine.step().unwrap();
            assert!(r.boundary);
            assert!((engine.group_lr(1).unwrap() - lrs[1]).abs() < 1e-15);
            assert!((r.lr - lrs[0]).abs() < 1e-15);
        }
        for (k, t) in [w, b].iter().enumerate() {
            for (got, want) in t.read_fp32().unwrap().iter().zip(&expect[k]) {
                assert!((*got as f64 - want).abs() <= 1e-5 * want.abs().max(1.0), "stage {stage}: {got} vs {want}");
            }
        }
    }
}

#[test]
fn host_boundaries_short_window_without_gas_division() {
    let engine = Engine::new(&config(2, 4), None).unwrap();
    let w = engine.add_param("w", &[6], Some(&[1.0; 6])).unwrap();
    engine.build().unwrap();
    engine.set_scale_wrt_gas(false).unwrap();
    let mut expect = vec![1.0f64; 6];
    for (step, window) in [4usize, 2, 1].iter().enumerate() {
        for micro in 0..*window {
            engine.set_gradient_accumulation_boundary(Some(micro + 1 == *window)).unwrap();
            let mut view = w.grad().unwrap();
            for (i, v) in view.as_f32_mut().unwrap().iter_mut().enumerate() {
                *v = grad_of(step, micro, 0, i);
                expect[i] -= 0.1 * grad_of(step, micro, 0, i) as f64;
            }
            view.ready().unwrap();
            if micro % 2 == 0 {
                // The reduction inside the host's backward (optional; a repeat is a no-op).
                engine.end_backward().unwrap();
                engine.end_backward().unwrap();
            }
            let r = engine.step().unwrap();
            assert_eq!(r.boundary, micro + 1 == *window);
        }
    }
    for (got, want) in w.read_fp32().unwrap().iter().zip(&expect) {
        assert!((*got as f64 - want).abs() <= 1e-5 * want.abs().max(1.0), "{got} vs {want}");
    }
}

#[test]
fn bad_group_input_is_an_error_naming_it() {
    let engine = Engine::new(&config(0, 1), None).unwrap();
    let w = engine.add_param("w", &[2], None).unwrap();
    let e = w.set_group(4).unwrap_err();
    assert!(e.message().contains("group 4 does not exist"), "{e}");
    let e = engine.set_group_hyper(0, "lr", -1.0).unwrap_err();
    assert!(e.message().contains("lr is -1"), "{e}");
    let e = engine.set_group_hyper(0, "beta1", 0.9).unwrap_err();
    assert!(e.message().contains("SGD does not use 'beta1'"), "{e}");
    assert!(engine.set_gradient_accumulation_boundary(None).is_ok());
    let e = engine.end_backward().unwrap_err();
    assert!(e.message().contains("build"), "{e}");
}

#[test]
fn device_option_picks_the_cpu_and_refuses_unknown_kinds() {
    let engine = Engine::new_on(&config(0, 1), None, Device { kind: DeviceType::Cpu, index: 0 }).unwrap();
    engine.add_param("w", &[2], None).unwrap();
    engine.build().unwrap();
    assert_eq!(engine.device().unwrap().kind, DeviceType::Cpu);
    let e = Engine::new_on(&config(0, 1), None, Device { kind: DeviceType::Other(9), index: 0 }).err().unwrap();
    assert!(e.message().contains("device_type is 9"), "{e}");
}
