//! GPU time of each kernel path, beside the device-to-device copy bandwidth
//! measured in the same run (`cargo bench --features gpu --bench gpu`).
//!
//! Each call is captured once in a CUDA graph and replayed: a warm-up, then
//! `REPS` timed replays (CUDA events around the replay alone), with the L2
//! flushed by a 512 MiB memset before each. The median is reported as µs, as
//! GB/s over the fewest bytes the call must move, and as a fraction of the
//! copy bandwidth. Results go to stdout and, when `$OUT` is set, to
//! `$OUT/bench.json` and `$OUT/bench.md`.

use cudarc::driver::sys::{CUevent_flags, CUgraphInstantiate_flags, CUstreamCaptureMode};
use cudarc::driver::{CudaSlice, CudaStream};
use half::bf16;
use specdec::{
    CacheData, CacheShape, Column, Cuda, DraftCache, DraftLogits, GumbelOutput, GumbelSample, Logits, LogitsData,
    RejectionOutput, RejectionSample, SlotTable, Tokens, Workspace,
};
use std::sync::Arc;

const REPS: usize = 50;
const FLUSH_BYTES: usize = 512 << 20;
const V: usize = 151_936;

struct Timer {
    stream: Arc<CudaStream>,
    flush: CudaSlice<u8>,
}

impl Timer {
    /// Median GPU time in µs of enqueueing directly (no graph).
    fn time_direct(&mut self, mut enqueue: impl FnMut(&Arc<CudaStream>)) -> f64 {
        let s = self.stream.clone();
        enqueue(&s);
        let mut times = Vec::with_capacity(REPS);
        for _ in 0..REPS {
            s.memset_zeros(&mut self.flush).unwrap();
            let start = s.record_event(Some(CUevent_flags::CU_EVENT_DEFAULT)).unwrap();
            enqueue(&s);
            let end = s.record_event(Some(CUevent_flags::CU_EVENT_DEFAULT)).unwrap();
            end.synchronize().unwrap();
            times.push(start.elapsed_ms(&end).unwrap() as f64 * 1000.0);
        }
        times.sort_by(f64::total_cmp);
        times[REPS / 2]
    }

    /// Median GPU time in µs of replaying what `enqueue` enqueues.
    fn time(&mut self, mut enqueue: impl FnMut(&Arc<CudaStream>)) -> f64 {
        let s = self.stream.clone();
        enqueue(&s); // warm-up: module load, first-launch costs
        s.synchronize().unwrap();
        s.begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL).unwrap();
        enqueue(&s);
        let graph = s.end_capture(CUgraphInstantiate_flags(0)).unwrap().expect("captured a graph");
        graph.launch().unwrap();
        let mut times = Vec::with_capacity(REPS);
        for _ in 0..REPS {
            s.memset_zeros(&mut self.flush).unwrap();
            let start = s.record_event(Some(CUevent_flags::CU_EVENT_DEFAULT)).unwrap();
            graph.launch().unwrap();
            let end = s.record_event(Some(CUevent_flags::CU_EVENT_DEFAULT)).unwrap();
            end.synchronize().unwrap();
            times.push(start.elapsed_ms(&end).unwrap() as f64 * 1000.0);
        }
        times.sort_by(f64::total_cmp);
        times[REPS / 2]
    }
}

struct Row {
    name: String,
    us: f64,
    bytes: f64,
}

fn logits(n: usize, salt: u64) -> Vec<f32> {
    // Roughly N(0, 1): a sum of four uniforms, centred and scaled.
    (0..n)
        .map(|i| {
            let w = specdec::rng::random_quad(salt, i as u64, specdec::rng::Stream::Accept, 0);
            let u: f32 = w.iter().map(|&x| x as f32 / 4_294_967_296.0).sum();
            (u - 2.0) * 1.732
        })
        .collect()
}

fn main() {
    let cuda = Cuda::on_device(0).expect("the GPU benchmark needs a CUDA device");
    let s = cuda.stream().clone();
    // Graph capture of cudarc's cross-stream events is not needed on one stream.
    // SAFETY: everything below runs on this one stream.
    unsafe { s.context().disable_event_tracking() };
    let mut timer = Timer { stream: s.clone(), flush: s.alloc_zeros(FLUSH_BYTES).unwrap() };
    let mut rows = Vec::new();

    // Copy bandwidth: 2 GiB device to device, reads + writes.
    let copy_n = 512 << 20;
    let src = s.alloc_zeros::<f32>(copy_n).unwrap();
    let mut dst = s.alloc_zeros::<f32>(copy_n).unwrap();
    // The faster of a graph memcpy node and a plain stream copy is the ceiling.
    let graph_us = timer.time(|s| s.memcpy_dtod(&src, &mut dst).unwrap());
    let direct_us = timer.time_direct(|s| s.memcpy_dtod(&src, &mut dst).unwrap());
    println!("copy: graph node {graph_us:.1} µs, stream copy {direct_us:.1} µs");
    let us = graph_us.min(direct_us);
    let copy_gbs = (2 * copy_n * 4) as f64 / us / 1e3;
    drop((src, dst));
    println!("device-to-device copy: {us:.1} µs, {copy_gbs:.0} GB/s");

    let max_rows = 1024;
    let mut ws: Workspace = cuda.workspace(max_rows * 8).unwrap();
    // 2048 rows (verification of B = 256, K = 7): the same 1024 rows twice.
    let mut host = logits(max_rows * V, 1);
    host.extend_from_within(..);
    let dlogits = s.clone_htod(&host).unwrap();
    drop(host);
    let slots: Vec<i32> = (0..max_rows as i32 * 8).collect();
    let dslots = s.clone_htod(&slots).unwrap();
    let dpos = s.clone_htod(&(0..max_rows as u64 * 8).collect::<Vec<_>>()).unwrap();
    let num_slots = max_rows * 8;
    let mut tokens = s.alloc_zeros::<i32>(max_rows * 8).unwrap();
    let seeds = s.clone_htod(&vec![7u64; num_slots]).unwrap();
    let mut cache = s.alloc_zeros::<bf16>(num_slots.min(1024) * 8 * V).unwrap();

    for (label, t) in [("greedy", 0.0f32), ("random", 0.8)] {
        let temps = s.clone_htod(&vec![t; num_slots]).unwrap();
        for n_rows in [1usize, 64, 1024] {
            let us = timer.time(|_| {
                let mut args = GumbelSample {
                    logits: Logits { data: LogitsData::F32(dlogits.as_view()), rows: n_rows, vocab: V, row_stride: V },
                    slots: dslots.slice(..n_rows),
                    pos: dpos.slice(..n_rows),
                    table: SlotTable { temperature: temps.as_view(), seed: seeds.as_view() },
                    drafting: false,
                    cache: None,
                };
                let out = GumbelOutput { tokens: Tokens::I32(tokens.slice_mut(..n_rows)), row_status: None };
                cuda.gumbel_sample(&mut ws, &mut args, out).unwrap();
            });
            rows.push(Row {
                name: format!("gumbel_sample {label} f32 rows={n_rows}"),
                us,
                bytes: (n_rows * V * 4) as f64,
            });
        }
    }
    {
        let temps = s.clone_htod(&vec![0.8f32; num_slots]).unwrap();
        let n_rows = 256;
        let us = timer.time(|_| {
            let mut args = GumbelSample {
                logits: Logits { data: LogitsData::F32(dlogits.as_view()), rows: n_rows, vocab: V, row_stride: V },
                slots: dslots.slice(..n_rows),
                pos: dpos.slice(..n_rows),
                table: SlotTable { temperature: temps.slice(..1024), seed: seeds.slice(..1024) },
                drafting: true,
                cache: Some((
                    DraftCache {
                        data: CacheData::BF16(cache.as_view_mut()),
                        slots: 1024,
                        k: 8,
                        width: V,
                        stride0: 8 * V,
                        stride1: V,
                    },
                    Column::All(3),
                )),
            };
            let out = GumbelOutput { tokens: Tokens::I32(tokens.slice_mut(..n_rows)), row_status: None };
            cuda.gumbel_sample(&mut ws, &mut args, out).unwrap();
        });
        rows.push(Row {
            name: format!("gumbel_sample drafting f32→bf16 cache rows={n_rows}"),
            us,
            bytes: (n_rows * V * 6) as f64,
        });
    }

    // Verification: B requests of K drafts each (rows = B·(K+1)), f32 target, bf16 draft logits.
    for (b, k) in [(1usize, 4usize), (64, 3), (256, 7)] {
        let rows_n = b * (k + 1);
        let offsets: Vec<i32> = (0..=b as i32).map(|r| r * (k as i32 + 1)).collect();
        let doffsets = s.clone_htod(&offsets).unwrap();
        let drafts: Vec<i32> = (0..rows_n as i32).map(|r| (r * 7919) % V as i32).collect();
        let ddrafts = s.clone_htod(&drafts).unwrap();
        let mut num_emitted = s.alloc_zeros::<i32>(b).unwrap();
        let mut vtokens = s.alloc_zeros::<i32>(b * (k + 1)).unwrap();
        for (label, t, one_hot) in [("greedy", 0.0f32, true), ("one-hot", 0.8, true), ("bf16 draft", 0.8, false)] {
            let temps = s.clone_htod(&vec![t; num_slots]).unwrap();
            let us = timer.time(|_| {
                let args = RejectionSample {
                    target: Logits { data: LogitsData::F32(dlogits.as_view()), rows: rows_n, vocab: V, row_stride: V },
                    offsets: doffsets.as_view(),
                    drafts: ddrafts.as_view(),
                    slots: dslots.slice(..b),
                    pos: dpos.slice(..rows_n),
                    table: SlotTable { temperature: temps.slice(..1024), seed: seeds.slice(..1024) },
                    max_drafts: k,
                    draft_logits: (!one_hot).then(|| DraftLogits {
                        data: LogitsData::BF16(cache.as_view()),
                        shape: CacheShape { slots: 1024, k: 8, width: V, stride0: 8 * V, stride1: V },
                    }),
                };
                let out = RejectionOutput {
                    tokens: Tokens::I32(vtokens.as_view_mut()),
                    num_emitted: num_emitted.as_view_mut(),
                    accepted: None,
                    row_status: None,
                };
                cuda.rejection_sample(&mut ws, &args, out).unwrap();
            });
            // One read of every target row, and of every draft row used, plus one re-read of a row per request.
            let draft_bytes = if one_hot || t == 0.0 { 0 } else { b * k * V * 2 };
            let reread = if t == 0.0 { 0 } else { b * V * (4 + if one_hot { 0 } else { 2 }) };
            let bytes = (rows_n * V * 4 + draft_bytes + reread) as f64;
            rows.push(Row { name: format!("rejection_sample {label} B={b} K={k}"), us, bytes });
        }
    }

    let mut md = format!(
        "| case | µs | GB/s | % of copy |\n| --- | ---: | ---: | ---: |\n| device-to-device copy (2 GiB) | {:.1} | {copy_gbs:.0} | 100 |\n",
        (2 * copy_n * 4) as f64 / copy_gbs / 1e3
    );
    let mut json = vec![format!("{{\"case\":\"copy\",\"gbs\":{copy_gbs:.1}}}")];
    for r in &rows {
        let gbs = r.bytes / r.us / 1e3;
        md += &format!("| {} | {:.1} | {gbs:.0} | {:.0} |\n", r.name, r.us, 100.0 * gbs / copy_gbs);
        json.push(format!(
            "{{\"case\":\"{}\",\"us\":{:.2},\"bytes\":{},\"gbs\":{gbs:.1},\"copy_fraction\":{:.3}}}",
            r.name,
            r.us,
            r.bytes,
            gbs / copy_gbs
        ));
    }
    println!("{md}");
    if let Ok(out) = std::env::var("OUT") {
        std::fs::write(format!("{out}/bench.md"), &md).unwrap();
        std::fs::write(format!("{out}/bench.json"), format!("[{}]\n", json.join(",\n"))).unwrap();
    }
}
