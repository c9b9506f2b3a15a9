//! The translation of other allocators' block events: PyTorch's frees held for the events it
//! records, footprints narrowed to blocks, NVTX regions, `cuCtxSynchronize_v2`.

use super::*;

fn block(function: &'static str, kind: Kind) -> Call {
    call(function, kind, 0)
}

fn torch_alloc(address: u64, bytes: u64, stream: u64) -> Call {
    block(
        "torch_block_alloc",
        Kind::BlockAlloc {
            stream,
            address,
            bytes,
        },
    )
}

fn torch_free(address: u64, stream: u64) -> Call {
    block("torch_block_free", Kind::BlockFree { stream, address })
}

fn record(event: u64, stream: u64) -> Call {
    call("cuEventRecord", Kind::EventRecord { event, stream }, 0)
}

#[test]
fn a_torch_free_names_the_streams_of_the_events_recorded_for_it_as_uses() {
    let lines = translate(&[
        alloc(0x1000, 0x1000),
        torch_alloc(0x1000, 512, 0),
        launch(0x20, &[0x1000]),
        torch_free(0x1000, 0),
        call("cuEventCreate", Kind::EventCreate { event: 0xe1 }, 0),
        record(0xe1, 0x20),
        launch(0, &[0x1000]),
    ]);
    assert_eq!(
        lines,
        [
            "mem_alloc 0x1000+4096",
            "stream_default legacy.0xc0 1",
            "block_alloc torch 0x1000+512 legacy.0xc0",
            "launch 0x20 rw:0x1000+512",
            "event_create 0xe1 1",
            "block_use torch 0x1000 0x20",
            "event_record 0xe1 0x20",
            // The free is written at the thread's next other call; the block is gone, so
            // the launch's word, between the carved allocation's live blocks, is a stale
            // pointer and no access.
            "block_free torch 0x1000 legacy.0xc0",
            "launch legacy.0xc0",
        ]
    );
}

#[test]
fn a_torch_free_without_uses_is_written_at_the_next_call_and_other_threads_wait() {
    let lines = translate(&[
        torch_alloc(0x1000, 512, 0),
        torch_free(0x1000, 0),
        // Another thread's event record is no use of the block.
        on_thread(record(0xe2, 0x30), 9),
        launch(0, &[]),
    ]);
    assert_eq!(
        lines,
        [
            "stream_default legacy.0xc0 1",
            "block_alloc torch 0x1000+512 legacy.0xc0",
            "event_record 0xe2 0x30",
            "block_free torch 0x1000 legacy.0xc0",
            "launch legacy.0xc0",
        ]
    );
}

#[test]
fn held_frees_are_written_before_any_block_event_and_at_exit() {
    let mut translator = Translator::new();
    let mut out = String::new();
    for call in [
        torch_alloc(0x1000, 512, 0x20),
        torch_free(0x1000, 0x20),
        on_thread(torch_alloc(0x1000, 256, 0x20), 9),
        torch_free(0x1000, 0x20),
    ] {
        translator.translate(&call, &mut out);
    }
    translator.exit(&mut out);
    let lines: Vec<&str> = out
        .lines()
        .map(|line| line.split("  #").next().unwrap_or(line))
        .collect();
    assert_eq!(
        lines,
        [
            "block_alloc torch 0x1000+512 0x20",
            "block_free torch 0x1000 0x20",
            "block_alloc torch 0x1000+256 0x20",
            "block_free torch 0x1000 0x20",
            "exit",
        ]
    );
}

#[test]
fn a_use_on_the_blocks_own_stream_is_not_written() {
    let lines = translate(&[
        torch_alloc(0x1000, 512, 0x20),
        torch_free(0x1000, 0x20),
        record(0xe1, 0x20),
        record(0xe2, 0x30),
        record(0xe3, 0x30),
        launch(0x20, &[]),
    ]);
    assert_eq!(
        lines,
        [
            "block_alloc torch 0x1000+512 0x20",
            "event_record 0xe1 0x20",
            "block_use torch 0x1000 0x30",
            "event_record 0xe2 0x30",
            "event_record 0xe3 0x30",
            "block_free torch 0x1000 0x20",
            "launch 0x20",
        ]
    );
}

#[test]
fn nvtx_regions_are_comments_that_narrow_footprints() {
    let lines = translate(&[
        alloc(0x1000, 0x1000),
        block(
            "nvtx_block_alloc",
            Kind::BlockAlloc {
                stream: 0x20,
                address: 0x1800,
                bytes: 256,
            },
        ),
        launch(0x20, &[0x1800, 0x1000]),
        block(
            "nvtx_block_free",
            Kind::BlockFree {
                stream: 0x20,
                address: 0x1800,
            },
        ),
        launch(0x20, &[0x1800]),
    ]);
    assert_eq!(
        lines,
        [
            "mem_alloc 0x1000+4096",
            "# block_alloc nvtx 0x1800+256  (nvtx_block_alloc tid=7)",
            "launch 0x20 rw:0x1800+256",
            "# block_free nvtx 0x1800  (nvtx_block_free tid=7)",
            "launch 0x20",
        ]
    );
}

#[test]
fn an_allocation_no_block_was_cut_from_is_still_whole() {
    let lines = translate(&[alloc(0x1000, 0x1000), launch(0x20, &[0x1800])]);
    assert_eq!(lines[1], "launch 0x20 rw:0x1000+4096");
}

#[test]
fn cu_ctx_synchronize_v2_waits_for_the_device() {
    let lines = translate(&[call("cuCtxSynchronize_v2", Kind::Note, 0)]);
    assert_eq!(lines, ["device_synchronize 1"]);
}

#[test]
fn the_runtimes_buffers_are_comments_that_narrow_footprints_to_the_buffer() {
    // Two buffers of one 2 MiB segment, each on its own stream: each launch's footprint is its
    // buffer, so the two do not overlap.
    let lines = translate(&[
        alloc(0x10_0000, 0x20_0000),
        block(
            "gpurt_region_block_alloc",
            Kind::BlockAlloc {
                stream: 0,
                address: 0x10_0000,
                bytes: 1000,
            },
        ),
        block(
            "gpurt_region_block_alloc",
            Kind::BlockAlloc {
                stream: 0,
                address: 0x10_0400,
                bytes: 4096,
            },
        ),
        launch(0x20, &[0x10_0000]),
        launch(0x30, &[0x10_0400]),
        block(
            "gpurt_region_block_free",
            Kind::BlockFree {
                stream: 0,
                address: 0x10_0000,
            },
        ),
        launch(0x20, &[0x10_0000]),
    ]);
    assert_eq!(
        lines,
        [
            "mem_alloc 0x100000+2097152",
            "# block_alloc gpurt_region 0x100000+1000  (gpurt_region_block_alloc tid=7)",
            "# block_alloc gpurt_region 0x100400+4096  (gpurt_region_block_alloc tid=7)",
            "launch 0x20 rw:0x100000+1000",
            "launch 0x30 rw:0x100400+4096",
            "# block_free gpurt_region 0x100000  (gpurt_region_block_free tid=7)",
            "launch 0x20",
        ]
    );
}
