//! A [`GpuDevice`] made of host memory, for [`GpuBackend`]'s tests: it
//! records each part's launches with a [`RecordingSink`], runs a part's
//! copies (so step inputs, imports and exports move as on a GPU, and the
//! launches do nothing), and can be told to stall the next submit with
//! given breadcrumbs.

use std::cell::Cell;
use std::ptr::NonNull;
use std::rc::Rc;
use std::time::Duration;

use super::device::{
    DeviceMemory, Frame, HostCopy, HostMemory, InFlight, Lower, Memory, Stall, Upload,
};
use super::mock::{Launch, RecordingSink};
use super::{GpuDevice, Lowering, MatrixTiles};
use crate::backend::BackendError;

/// Memory with a made-up device address; the cells let the host and the
/// "device" write it through shared handles.
pub(crate) struct MockMemory {
    pub what: &'static str,
    pub address: u64,
    pub data: Box<[Cell<u8>]>,
}

impl MockMemory {
    pub fn read(&self, at: u64, len: usize) -> Vec<u8> {
        self.data[at as usize..at as usize + len]
            .iter()
            .map(Cell::get)
            .collect()
    }

    pub fn write(&self, at: u64, bytes: &[u8]) {
        for (c, &b) in self.data[at as usize..].iter().zip(bytes) {
            c.set(b);
        }
    }
}

impl DeviceMemory for Rc<MockMemory> {
    fn address(&self) -> u64 {
        self.address
    }

    fn bytes(&self) -> u64 {
        self.data.len() as u64
    }
}

impl HostMemory for Rc<MockMemory> {
    fn host_ptr(&self) -> NonNull<u8> {
        // Cell<u8> has u8's layout, and a pointer from a Cell may write.
        NonNull::new(Cell::as_ptr(&self.data[0])).expect("a live allocation")
    }
}

pub(crate) struct MockPart {
    pub launches: Vec<Launch>,
    pub copies_in: Vec<HostCopy>,
    pub copies_out: Vec<HostCopy>,
    pub crumbs: u64,
}

/// What a test can see of the device after the backend took it.
#[derive(Default)]
pub(crate) struct Seen {
    /// Every allocation, live or freed.
    pub allocations: std::cell::RefCell<Vec<Rc<MockMemory>>>,
    pub freed: Cell<usize>,
    pub abandoned: Cell<bool>,
    /// The next submit stalls, after writing these breadcrumbs.
    pub stall_with: std::cell::RefCell<Option<Vec<u8>>>,
    /// Launches of the parts recorded so far, in order.
    pub recorded: std::cell::RefCell<Vec<Vec<Launch>>>,
    /// How many copies in and out each of them has.
    pub copies: std::cell::RefCell<Vec<(usize, usize)>>,
}

impl Seen {
    /// The live allocation of `what` made last.
    pub fn find(&self, what: &str) -> Rc<MockMemory> {
        let all = self.allocations.borrow();
        all.iter()
            .rev()
            .find(|m| m.what == what)
            .cloned()
            .unwrap_or_else(|| panic!("no allocation of {what}"))
    }
}

pub(crate) struct MockDevice {
    pub seen: Rc<Seen>,
    next_address: u64,
    lowering: Lowering,
    max_region: u64,
}

impl MockDevice {
    pub fn new(max_region: u64) -> (MockDevice, Rc<Seen>) {
        let seen = Rc::new(Seen::default());
        let lowering = Lowering {
            fuse: true,
            int_matvec: true,
            int_expert_matvec: true,
            grouped_experts: true,
            int_dot_names: false,
            matrix: MatrixTiles::Off,
            matrix_prefetch: false,
            q8_packed_blocks_per_group: 64,
            int_rows: 2,
            expert_int_rows: 2,
            row_teams: true,
            compute_units: 0,
            subgroup_decode: false,
            split_min: crate::gpu::split::SPLIT_MIN_POSITIONS as u32,
            int_teams: 1,
            matrix_attention: false,
        };
        let device = MockDevice {
            seen: seen.clone(),
            next_address: 0x1000_0000,
            lowering,
            max_region,
        };
        (device, seen)
    }

    fn memory(&mut self, what: &'static str, bytes: u64) -> Rc<MockMemory> {
        let m = Rc::new(MockMemory {
            what,
            address: self.next_address,
            data: (0..bytes.max(256)).map(|_| Cell::new(0)).collect(),
        });
        self.next_address += bytes.next_multiple_of(1 << 20) + (1 << 20);
        self.seen.allocations.borrow_mut().push(m.clone());
        m
    }
}

impl GpuDevice for MockDevice {
    type Buffer = Rc<MockMemory>;
    type Host = Rc<MockMemory>;
    type Part = MockPart;

    const NAME: &'static str = "mock";

    fn summary(&self) -> String {
        "mock device (host memory)".into()
    }

    fn lowering(&self) -> Lowering {
        self.lowering
    }

    fn max_region(&self) -> u64 {
        self.max_region
    }

    fn free_memory(&self) -> Option<u64> {
        None
    }

    fn allocation_calls(&self) -> usize {
        self.seen.allocations.borrow().len()
    }

    fn crumb_bytes(&self) -> usize {
        8
    }

    fn alloc(
        &mut self,
        what: &'static str,
        bytes: u64,
        _: Memory,
    ) -> Result<Self::Buffer, BackendError> {
        Ok(self.memory(what, bytes))
    }

    fn alloc_host(&mut self, what: &'static str, bytes: u64) -> Result<Self::Host, BackendError> {
        Ok(self.memory(what, bytes))
    }

    unsafe fn free(&mut self, _: Self::Buffer) {
        self.seen.freed.set(self.seen.freed.get() + 1);
    }

    unsafe fn free_host(&mut self, _: Self::Host) {
        self.seen.freed.set(self.seen.freed.get() + 1);
    }

    unsafe fn upload(
        &mut self,
        _: &mut Option<Self::Host>,
        job: Upload<Self::Buffer>,
    ) -> Result<(), BackendError> {
        let Upload {
            regions,
            pieces,
            progress,
            ..
        } = job;
        for p in pieces {
            regions[p.region].write(p.offset, p.bytes);
        }
        let total = pieces.iter().map(|p| p.bytes.len() as u64).sum();
        progress(total, total);
        Ok(())
    }

    fn record(&mut self, frame: &Frame<Self>, lower: &mut Lower) -> Result<MockPart, BackendError> {
        let mut sink = RecordingSink::new();
        lower(&mut sink)?;
        self.seen.recorded.borrow_mut().push(sink.launches.clone());
        let copies = (frame.copies_in.len(), frame.copies_out.len());
        self.seen.copies.borrow_mut().push(copies);
        Ok(MockPart {
            launches: sink.launches,
            copies_in: frame.copies_in.to_vec(),
            copies_out: frame.copies_out.to_vec(),
            crumbs: frame.crumbs,
        })
    }

    unsafe fn submit(
        &mut self,
        part: &MockPart,
        arena: &Self::Buffer,
        host: &Self::Host,
        _: Duration,
    ) -> Result<(), Stall> {
        if let Some(crumbs) = self.seen.stall_with.borrow_mut().take() {
            host.write(part.crumbs, &crumbs);
            return Err(Stall::Timeout(Duration::from_millis(1500)));
        }
        for c in &part.copies_in {
            arena.write(c.arena, &host.read(c.host, c.bytes));
        }
        for c in &part.copies_out {
            host.write(c.host, &arena.read(c.arena, c.bytes));
        }
        Ok(())
    }

    /// Breadcrumbs as HIP keeps them, in windows of 8: byte w is set
    /// after window w.
    fn in_flight(&self, part: &MockPart, crumbs: &[u8]) -> Option<InFlight> {
        let windows = (part.launches.len() / 8).min(crumbs.len());
        let done = crumbs[..windows].iter().take_while(|&&b| b != 0).count();
        Some(InFlight {
            done: done * 8,
            window: 8,
        })
    }

    fn describe(&self, _: &MockPart) -> Option<String> {
        Some("mock replay".into())
    }

    fn stall_hint(&self) -> Option<&'static str> {
        Some("likely cause: the test said so")
    }

    unsafe fn free_part(&mut self, _: MockPart) {}

    fn idle(&mut self, _: Duration) -> Result<(), Stall> {
        Ok(())
    }

    fn spin(&mut self, timeout: Duration) -> Result<(), Stall> {
        Err(Stall::Timeout(timeout))
    }

    fn abandon(&mut self) {
        self.seen.abandoned.set(true);
    }
}
