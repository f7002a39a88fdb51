//! A small model trained to convergence through the safe API at every ZeRO stage, and the first
//! Adam steps compared with an independent float64 Adam.
#[path = "common/linear.rs"]
mod linear;

use dsrt::{Config, Engine};
use linear::*;

fn train(stage: i32, steps: usize) -> (f64, f64, f32) {
    let config = Config::parse(&config_json(stage, 0.05, 16)).unwrap();
    let engine = Engine::new(&config, None).unwrap();
    let (w, b) = register(&engine).unwrap();
    let t = target();
    let mut rng = Lcg(99);
    let mut first = None;
    let mut last = 0.0;
    for step in 0..steps {
        let (xs, ys) = batch(&mut rng, &t, 16);
        let (loss, r) = train_step(&engine, w, b, &xs, &ys).unwrap_or_else(|e| panic!("stage {stage} step {step}: {e}"));
        assert!(r.boundary && !r.overflow, "stage {stage}: {r:?}");
        assert_eq!(r.global_step, step as i64 + 1);
        first.get_or_insert(loss);
        last = loss;
    }
    let wv = w.read_fp32().unwrap();
    let bv = b.read_fp32().unwrap();
    let max_err = wv.iter().zip(&t.w).chain(bv.iter().zip(&t.b)).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
    (first.unwrap(), last, max_err)
}

fn converges(stage: i32) {
    let (first, last, max_err) = train(stage, 400);
    println!("stage {stage}: loss {first:.3e} -> {last:.3e}, max |W - W*| = {max_err:.2e}");
    assert!(last < first * 1e-4, "stage {stage}: loss {first:.3e} -> {last:.3e}");
    assert!(max_err < 1e-2, "stage {stage}: weights off by {max_err}");
}

#[test]
fn converges_stage0() {
    converges(0);
}
#[test]
fn converges_stage1() {
    converges(1);
}
#[test]
fn converges_stage2() {
    converges(2);
}
#[test]
fn converges_stage3() {
    converges(3);
}

/// The master weights after each of the first steps equal a float64 Adam (bias-corrected,
/// eps outside the square root, no weight decay) fed the same gradients, clipped as DeepSpeed does
/// when the config has no gradient_clipping key (max norm 1.0: times 1 / (norm + 1e-6) when below 1).
#[test]
fn first_steps_match_float64_adam() {
    let (lr, b1, b2, eps) = (0.05f64, 0.9f64, 0.999f64, 1e-8f64);
    let config = Config::parse(&config_json(2, lr, 16)).unwrap();
    let engine = Engine::new(&config, None).unwrap();
    let (w, b) = register(&engine).unwrap();
    let t = target();
    let mut rng = Lcg(5);
    let mut p: Vec<f64> = w.read_fp32().unwrap().iter().chain(b.read_fp32().unwrap().iter()).map(|&v| v as f64).collect();
    let (mut m, mut v) = (vec![0f64; p.len()], vec![0f64; p.len()]);
    for step in 1..=5 {
        let (xs, ys) = batch(&mut rng, &t, 16);
        let wv = w.read_fp32().unwrap();
        let bv = b.read_fp32().unwrap();
        let (_, gw, gb) = loss_and_grads(&wv, &bv, &xs, &ys);
        let (_, r) = train_step(&engine, w, b, &xs, &ys).unwrap();
        assert!((r.lr - lr).abs() < 1e-12, "constant lr without a scheduler: {}", r.lr);
        let g: Vec<f64> = gw.iter().chain(&gb).map(|&x| x as f32 as f64).collect();
        let norm = g.iter().map(|x| x * x).sum::<f64>().sqrt();
        assert!((r.grad_norm - norm).abs() <= 1e-4 * norm, "step {step}: grad_norm {} vs {norm}", r.grad_norm);
        let coefficient = (1.0 / (norm + 1e-6)).min(1.0);
        let g: Vec<f64> = g.iter().map(|x| x * coefficient).collect();
        for i in 0..p.len() {
            m[i] = b1 * m[i] + (1.0 - b1) * g[i];
            v[i] = b2 * v[i] + (1.0 - b2) * g[i] * g[i];
            let mh = m[i] / (1.0 - b1.powi(step));
            let vh = v[i] / (1.0 - b2.powi(step));
            p[i] -= lr * mh / (vh.sqrt() + eps);
        }
        let got: Vec<f32> = w.read_fp32().unwrap().into_iter().chain(b.read_fp32().unwrap()).collect();
        for (i, (&a, &e)) in got.iter().zip(&p).enumerate() {
            let tol = 1e-5 * e.abs().max(1e-2);
            assert!((a as f64 - e).abs() <= tol, "step {step} value {i}: dsrt {a} vs float64 Adam {e}");
        }
    }
}
