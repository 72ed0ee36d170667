use super::*;

fn cfg(temperature: f32, top_k: usize, top_p: f32, min_p: f32) -> SamplerConfig {
    SamplerConfig {
        temperature,
        top_k,
        top_p,
        min_p,
        repeat_penalty: 1.0,
        repeat_last_n: 64,
        seed: 42,
    }
}

fn sampler(c: SamplerConfig) -> Sampler {
    Sampler::new(c).expect("valid config")
}

/// Ids left after penalty and the tail cuts, before temperature and draw.
fn survivors(s: &mut Sampler, logits: &[f32]) -> Vec<u32> {
    s.load(logits);
    s.apply_repeat_penalty();
    s.truncate();
    let mut ids: Vec<u32> = s.cands.iter().map(|c| c.id).collect();
    ids.sort_unstable();
    ids
}

fn noise(n: usize, seed: u64) -> Vec<f32> {
    let mut rng = SplitMix64(seed);
    (0..n)
        .map(|_| (rng.next_f64() * 20.0 - 10.0) as f32)
        .collect()
}

fn ln(p: &[f32]) -> Vec<f32> {
    p.iter().map(|x| x.ln()).collect()
}

#[test]
fn defaults_are_llama_cpp_and_valid() {
    let d = SamplerConfig::default();
    assert_eq!(
        (d.temperature, d.top_k, d.top_p, d.min_p),
        (0.8, 40, 0.95, 0.05)
    );
    assert_eq!((d.repeat_penalty, d.repeat_last_n), (1.0, 64));
    assert!(d.validate().is_ok());
}

#[test]
fn invalid_configs_are_rejected() {
    let base = SamplerConfig::default;
    let bad = [
        (
            SamplerConfig {
                temperature: -0.1,
                ..base()
            },
            SamplerError::Temperature(-0.1),
        ),
        (
            SamplerConfig {
                top_p: 0.0,
                ..base()
            },
            SamplerError::TopP(0.0),
        ),
        (
            SamplerConfig {
                top_p: 1.5,
                ..base()
            },
            SamplerError::TopP(1.5),
        ),
        (
            SamplerConfig {
                min_p: -0.5,
                ..base()
            },
            SamplerError::MinP(-0.5),
        ),
        (
            SamplerConfig {
                min_p: 2.0,
                ..base()
            },
            SamplerError::MinP(2.0),
        ),
        (
            SamplerConfig {
                repeat_penalty: 0.0,
                ..base()
            },
            SamplerError::RepeatPenalty(0.0),
        ),
    ];
    for (c, e) in bad {
        assert_eq!(c.validate(), Err(e));
        assert!(Sampler::new(c).is_err());
    }
    for c in [
        SamplerConfig {
            temperature: f32::NAN,
            ..base()
        },
        SamplerConfig {
            temperature: f32::INFINITY,
            ..base()
        },
        SamplerConfig {
            top_p: f32::NAN,
            ..base()
        },
        SamplerConfig {
            min_p: f32::NAN,
            ..base()
        },
        SamplerConfig {
            repeat_penalty: f32::NAN,
            ..base()
        },
    ] {
        assert!(c.validate().is_err(), "{c:?}");
    }
    assert!(SamplerConfig {
        temperature: 0.0,
        top_p: 1.0,
        min_p: 0.0,
        ..base()
    }
    .validate()
    .is_ok());
}

#[test]
fn greedy_picks_argmax_lowest_id_on_ties() {
    let mut s = sampler(cfg(0.0, 40, 0.95, 0.05));
    assert_eq!(s.sample(&[0.1, 3.0, -2.0, 2.9]), 1);
    assert_eq!(s.sample(&[1.0, 5.0, 5.0, 5.0]), 1);
    assert_eq!(s.sample(&[f32::NAN, -1.0, f32::NAN]), 1);
    assert_eq!(s.sample(&[]), 0);
    let logits = noise(5000, 1);
    let best = (0..logits.len()).fold(0, |b, i| if logits[i] > logits[b] { i } else { b });
    assert_eq!(s.sample(&logits), best as u32);
}

#[test]
fn top_k_one_equals_greedy_at_any_temperature() {
    let mut greedy = sampler(cfg(0.0, 0, 1.0, 0.0));
    for (i, t) in [0.1f32, 0.8, 1.0, 5.0, 100.0].into_iter().enumerate() {
        let mut s = sampler(cfg(t, 1, 1.0, 0.0));
        for j in 0..20 {
            let mut logits = noise(3000, (i * 100 + j) as u64);
            logits[7] = logits[123]; // a tie somewhere, usually not the max
            assert_eq!(s.sample(&logits), greedy.sample(&logits));
        }
    }
    // Ties at the top resolve to the lowest id, as greedy does.
    let mut s = sampler(cfg(2.0, 1, 1.0, 0.0));
    assert_eq!(s.sample(&[0.0, 4.0, 1.0, 4.0]), 1);
}

#[test]
fn top_k_keeps_exactly_the_k_best() {
    let logits = noise(10_000, 3);
    let mut s = sampler(cfg(1.0, 25, 1.0, 0.0));
    let got = survivors(&mut s, &logits);
    let mut order: Vec<u32> = (0..logits.len() as u32).collect();
    order.sort_by(|&a, &b| logits[b as usize].total_cmp(&logits[a as usize]));
    let mut expect = order[..25].to_vec();
    expect.sort_unstable();
    assert_eq!(got, expect);
}

#[test]
fn top_p_and_min_p_cut_the_tail() {
    let logits = ln(&[0.15, 0.5, 0.04, 0.3, 0.01]);
    // Mass in rank order: 0.5, 0.8, 0.95, 0.99, 1.0.
    let cases = [
        (0.75, vec![1, 3]),
        (0.9, vec![0, 1, 3]),
        (0.97, vec![0, 1, 2, 3]),
        (0.3, vec![1]),
    ];
    for (p, expect) in cases {
        assert_eq!(
            survivors(&mut sampler(cfg(1.0, 0, p, 0.0)), &logits),
            expect,
            "top_p {p}"
        );
    }
    // min_p 0.1 keeps p >= 0.05: drops 0.04 and 0.01.
    assert_eq!(
        survivors(&mut sampler(cfg(1.0, 0, 1.0, 0.1)), &logits),
        vec![0, 1, 3]
    );
    // min_p 0.5 keeps p >= 0.25.
    assert_eq!(
        survivors(&mut sampler(cfg(1.0, 0, 1.0, 0.5)), &logits),
        vec![1, 3]
    );
    // All off: everything survives.
    assert_eq!(
        survivors(&mut sampler(cfg(1.0, 0, 1.0, 0.0)), &logits),
        vec![0, 1, 2, 3, 4]
    );
    // Chained: top_k 2 first, then top_p renormalises over those two
    // (0.5/0.8 = 0.625 < 0.7, so both stay).
    assert_eq!(
        survivors(&mut sampler(cfg(1.0, 2, 0.7, 0.0)), &logits),
        vec![1, 3]
    );
}

#[test]
fn top_p_over_a_large_vocab_matches_a_full_sort() {
    // The needed mass spans several prefix doublings.
    let logits: Vec<f32> = noise(20_000, 9).iter().map(|x| x * 0.3).collect();
    for p in [0.05f32, 0.5, 0.9] {
        let mut order: Vec<usize> = (0..logits.len()).collect();
        order.sort_by(|&a, &b| logits[b].total_cmp(&logits[a]));
        let max = logits[order[0]];
        let w: Vec<f64> = order
            .iter()
            .map(|&i| f64::from((logits[i] - max).exp()))
            .collect();
        let total: f64 = w.iter().sum();
        let mut cum = 0.0;
        let count = w.iter().position(|x| {
            cum += x / total;
            cum >= f64::from(p)
        });
        let mut expect: Vec<u32> = order[..count.unwrap() + 1]
            .iter()
            .map(|&i| i as u32)
            .collect();
        expect.sort_unstable();
        let got = survivors(&mut sampler(cfg(1.0, 0, p, 0.0)), &logits);
        assert!(got.len() > TOP_P_FIRST_PREFIX, "p={p}: test too easy");
        assert_eq!(got, expect, "p={p}");
    }
}

#[test]
fn same_seed_same_sequence_different_seed_different() {
    let logits = noise(1000, 5).iter().map(|x| x * 0.1).collect::<Vec<_>>();
    let run = |seed| {
        let mut s = sampler(SamplerConfig {
            seed,
            ..cfg(1.0, 0, 1.0, 0.0)
        });
        (0..200).map(|_| s.sample(&logits)).collect::<Vec<_>>()
    };
    assert_eq!(run(7), run(7));
    let (a, b) = (run(7), run(8));
    let same = a.iter().zip(&b).filter(|(x, y)| x == y).count();
    assert!(same < 50, "{same} of 200 draws agree across seeds");
}

#[test]
fn repetition_penalty_lowers_recent_tokens() {
    let logits = [2.0f32, 1.9, -1.0, -1.1];
    let c = SamplerConfig {
        repeat_penalty: 1.2,
        ..cfg(0.0, 0, 1.0, 0.0)
    };
    let mut s = sampler(c);
    assert_eq!(s.sample(&logits), 0);
    s.accept(0);
    // 2.0 / 1.2 = 1.67 < 1.9.
    assert_eq!(s.sample(&logits), 1);
    // Negative logits are multiplied: -1.0 * 1.2 = -1.2 < -1.1.
    s.accept(2);
    s.accept(2); // counted once, not twice
    s.accept(99); // outside the vocabulary: ignored
    s.load(&logits);
    s.apply_repeat_penalty();
    let got: Vec<f32> = s.cands.iter().map(|c| c.logit).collect();
    assert_eq!(got, vec![2.0 / 1.2, 1.9, -1.2, -1.1]);
}

#[test]
fn repetition_window_forgets_old_tokens() {
    let logits = [2.0f32, 1.9];
    let c = SamplerConfig {
        repeat_penalty: 1.5,
        repeat_last_n: 2,
        ..cfg(0.0, 0, 1.0, 0.0)
    };
    let mut s = sampler(c);
    s.accept(0);
    assert_eq!(s.sample(&logits), 1);
    s.accept(5);
    s.accept(6); // token 0 has left the 2-token window
    assert_eq!(s.sample(&logits), 0);
    s.accept(0);
    s.reset();
    assert_eq!(s.sample(&logits), 0);
}

#[test]
fn draw_frequencies_follow_the_distribution() {
    let n = 40_000;
    let count = |c: SamplerConfig, logits: &[f32]| {
        let mut s = sampler(c);
        let mut hits = [0usize; 3];
        for _ in 0..n {
            hits[s.sample(logits) as usize] += 1;
        }
        hits.map(|h| h as f64 / n as f64)
    };
    let logits = ln(&[0.2, 0.3, 0.5]);
    let f = count(cfg(1.0, 0, 1.0, 0.0), &logits);
    for (got, want) in f.iter().zip([0.2, 0.3, 0.5]) {
        assert!((got - want).abs() < 0.015, "{f:?}");
    }
    // Temperature 0.5 squares the probabilities: (4, 9, 25) / 38.
    let f = count(cfg(0.5, 0, 1.0, 0.0), &logits);
    for (got, want) in f.iter().zip([4.0 / 38.0, 9.0 / 38.0, 25.0 / 38.0]) {
        assert!((got - want).abs() < 0.015, "{f:?}");
    }
}

#[test]
fn impossible_tokens_are_never_drawn() {
    let logits = [f32::NEG_INFINITY, 0.0, f32::NAN, 0.0];
    let mut s = sampler(cfg(1.0, 0, 1.0, 0.0));
    for _ in 0..500 {
        let id = s.sample(&logits);
        assert!(id == 1 || id == 3, "{id}");
    }
    assert_eq!(s.sample(&[f32::NEG_INFINITY; 3]), 0);
}

#[test]
fn splitmix_known_output() {
    // First outputs for seed 0 of the published reference implementation.
    let mut r = SplitMix64(0);
    assert_eq!(r.next_u64(), 0xE220_A839_7B1D_CDAF);
    assert_eq!(r.next_u64(), 0x6E78_9E6A_A1B9_65F4);
    let u = SplitMix64(123).next_f64();
    assert!((0.0..1.0).contains(&u));
}
