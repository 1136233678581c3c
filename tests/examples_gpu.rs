//! The library's GPU example, `crates/host/examples/cuda_graph.rs`, run on
//! CUDA device 0 (feature `gpu`): a drafting and a verification call captured
//! in one CUDA graph, whose replay must emit what the direct calls did.
#![cfg(feature = "gpu")]

#[path = "../crates/host/examples/cuda_graph.rs"]
mod cuda_graph;

#[test]
fn the_cuda_graph_example_runs() {
    cuda_graph::main().unwrap_or_else(|e| panic!("examples/cuda_graph.rs: {e}"));
}
