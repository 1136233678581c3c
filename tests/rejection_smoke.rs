//! Quick checks of `rejection_sample`'s mechanics on every backend; the
//! distribution suites are in `rejection_stats.rs`.

use specdec::{Backend, DType, DraftLogitsShape};
use specdec_suite::batch::Values;
use specdec_suite::{Verify, test_device};

fn rows(vocab: usize, count: usize, salt: u64) -> Vec<f32> {
    (0..vocab * count)
        .map(|i| {
            let h = specdec::rng::random_u32(salt, i as u64, specdec::rng::Stream::Accept, 1);
            (h % 3001) as f32 / 400.0 - 3.0
        })
        .collect()
}

/// A batch whose draft logits equal the target rows: `q == p`, every draft accepted.
fn same_as_target(vocab: usize, n: &[usize], k: usize, t: f32, dtype: DType) -> Verify {
    let target = rows(vocab, n.iter().sum::<usize>() + n.len(), 5);
    let mut v = Verify::new(Values::from_f32(dtype, &target), vocab, n, k, t);
    // Draft column i of slot r = target row offsets[r] + i.
    let mut draft_logits = vec![0f32; n.len() * k * vocab];
    for r in 0..n.len() {
        for i in 0..n[r] {
            let row = v.offsets[r] as usize + i;
            draft_logits[(r * k + i) * vocab..][..vocab].copy_from_slice(&target[row * vocab..][..vocab]);
            v.drafts[row] = ((row * 7919) % vocab) as i32;
        }
    }
    let shape = DraftLogitsShape::dense(n.len(), k, vocab);
    v.draft = Some((Values::from_f32(dtype, &draft_logits), shape));
    v
}

test_device!(equal_distributions_accept_everything, |backend, scale| {
    for dtype in DType::ALL {
        let n = [3, 0, 1, 3, 2];
        let v = same_as_target(999, &n, 3, 0.8, dtype);
        let out = v.run(&backend).unwrap();
        for (r, &drafts) in n.iter().enumerate() {
            assert_eq!(out.num_emitted[r], drafts as i32 + 1, "{dtype:?} request {r}: {:?}", out.request(r));
            assert_eq!(out.accepted[r], drafts as i32);
            let row0 = v.offsets[r] as usize;
            for i in 0..drafts {
                assert_eq!(out.request(r)[i], v.drafts[row0 + i] as i64);
            }
            assert!((0..999).contains(&out.request(r)[drafts]));
            assert!(out.request(r)[drafts + 1..].iter().all(|&t| t == -1));
        }
        assert!(out.row_status.iter().all(|&s| s == 0));
    }
    let _ = scale;
});

test_device!(backend_matches_cpu, |backend, scale| {
    for dtype in DType::ALL {
        for one_hot in [false, true] {
            let n = [3, 0, 1, 3, 2, 3];
            let mut v = same_as_target(4097, &n, 3, 1.0, dtype);
            // Perturb the draft so some drafts get rejected, mix greedy and random.
            if let Some((Values::F32(c), _)) = &mut v.draft {
                c.iter_mut().enumerate().for_each(|(i, x)| *x += (i % 13) as f32 * 0.3);
            }
            if one_hot {
                v.draft = None;
            }
            v.temperature = vec![1.0, 0.0, 0.6, 1.5, 0.0, 1.0];
            v.slots[5] = -1;
            let got = v.run(&backend).unwrap();
            let want = v.run(&Backend::cpu()).unwrap();
            assert_eq!(got, want, "{dtype:?} one_hot {one_hot}");
        }
    }
    let _ = scale;
});
