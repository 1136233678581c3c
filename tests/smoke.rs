//! A quick end-to-end check of every dtype combination: the backend under test
//! returns exactly the CPU backend's tokens, draft logits and flags.

use specdec::{Backend, DType};
use specdec_suite::batch::{ColumnSpec, Values};
use specdec_suite::{Batch, DraftLogitsSpec, test_device};

fn logits(rows: usize, vocab: usize, salt: u64) -> Vec<f32> {
    (0..rows * vocab)
        .map(|i| {
            let h = specdec::rng::random_u32(salt, i as u64, specdec::rng::Stream::Accept, 0);
            (h % 4001) as f32 / 500.0 - 4.0
        })
        .collect()
}

fn batch(dtype: DType, draft: Option<DType>, rows: usize, vocab: usize) -> Batch {
    let mut b = Batch::new(Values::from_f32(dtype, &logits(rows, vocab, vocab as u64)), rows, vocab, 1.0, 7);
    b.temperature = vec![0.0, 0.6, 1.0, 1.5, 1.0, 0.6, 0.0, 1.5];
    b.seed = vec![1, 2, 3, u64::MAX, 5, 6, 7, 8];
    // Distinct slots: two rows writing one draft-logits column would race.
    b.slots = (0..rows as i32).map(|r| r % 9 - 1).collect();
    b.pos = (0..rows as u64).map(|r| r * 1_000_003 + (1 << 40)).collect();
    b.draft_logits = draft.map(|c| DraftLogitsSpec::dense(c, 8, 2, vocab + 3, ColumnSpec::All(1)));
    b
}

test_device!(every_dtype_matches_cpu, |backend, scale| {
    for dtype in DType::ALL {
        for draft in [None, Some(DType::F32), Some(DType::BF16), Some(DType::F16)] {
            for (rows, vocab) in [(1, 1), (3, 999), (9, 4097), (2, 151_936)] {
                let mut ours = batch(dtype, draft, rows, vocab);
                let mut reference = ours.clone();
                let got = ours.run(&backend).unwrap();
                let want = reference.run(&Backend::cpu()).unwrap();
                let ctx = format!("{dtype:?} draft logits {draft:?} rows {rows} V {vocab}");
                assert_eq!(got, want, "{ctx}");
                if let (Some(a), Some(b)) = (&ours.draft_logits, &reference.draft_logits) {
                    assert!((0..a.data.len()).all(|i| a.data.bits(i) == b.data.bits(i)), "draft logits differ: {ctx}");
                }
                assert!(got.tokens.iter().all(|&t| (0..vocab as i64).contains(&t)), "{ctx}");
            }
        }
    }
    let _ = scale;
});
