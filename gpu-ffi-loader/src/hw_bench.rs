//! The hardware benchmarks' measuring and reporting, shared by the driver crates' `hw`
//! benches: interleaved batches with medians ([`Plan`]), and the table of ours beside the
//! driver with ratios and targets ([`Report`]). Used by benchmark programs only.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Any failure of a case: a toolkit error, a driver error, or a wrong answer.
pub type Outcome<T> = Result<T, Box<dyn std::error::Error>>;

/// One kibibyte.
pub const KIB: usize = 1 << 10;
/// One mebibyte.
pub const MIB: usize = 1 << 20;

/// How long to measure: the full run (`--bench`) or a smoke run.
#[derive(Clone, Copy)]
pub struct Plan {
    /// The full run (`--bench`); otherwise a smoke run whose figures mean nothing.
    pub full: bool,
}

/// One side of a measurement: runs M calls (and synchronises whatever GPU work they enqueued
/// where the side says so) and returns the time it counts, usually the whole batch ([`whole`]).
pub type Side<'a> = &'a mut dyn FnMut(usize) -> Outcome<Duration>;

/// A batch timed from its first call until it returns.
pub fn whole(
    mut batch: impl FnMut(usize) -> Outcome<()>,
) -> impl FnMut(usize) -> Outcome<Duration> {
    move |calls| {
        let start = Instant::now();
        batch(calls)?;
        Ok(start.elapsed())
    }
}

impl Plan {
    /// Median per-call nanoseconds of each side, measured interleaved: one untimed warm-up
    /// batch of each side, then N rounds of one timed batch of M calls per side, the side that
    /// goes first moving on by one each round. GPU clocks, the driver's state and the host's
    /// load drift during a run; measured one after the other, the sides would see different
    /// parts of that drift, interleaved they see the same. A smoke run times 1 round of at
    /// most 2 calls.
    pub fn interleaved<const SIDES: usize>(
        &self,
        rounds: usize,
        calls_per_batch: usize,
        mut sides: [Side<'_>; SIDES],
    ) -> Outcome<[f64; SIDES]> {
        let (rounds, calls) = if self.full {
            (rounds, calls_per_batch)
        } else {
            (1, calls_per_batch.min(2))
        };
        for side in sides.iter_mut() {
            side(calls)?;
        }
        let mut samples: [Vec<f64>; SIDES] = std::array::from_fn(|_| Vec::with_capacity(rounds));
        for round in 0..rounds {
            for turn in 0..SIDES {
                let side = (round + turn) % SIDES;
                let time = sides[side](calls)?;
                samples[side].push(time.as_nanos() as f64 / calls as f64);
            }
        }
        Ok(samples.map(|mut samples| {
            samples.sort_by(f64::total_cmp);
            samples[samples.len() / 2]
        }))
    }

    /// Median per-call nanoseconds of `batch(M)` alone (a one-sided [`Plan::interleaved`]),
    /// for figures with nothing measured beside them in the same case.
    pub fn median_per_call(
        &self,
        batches: usize,
        calls_per_batch: usize,
        batch: impl FnMut(usize) -> Outcome<()>,
    ) -> Outcome<f64> {
        let [median] = self.interleaved(batches, calls_per_batch, [&mut whole(batch)])?;
        Ok(median)
    }

    /// `full` in the full run, `smoke` in a smoke run.
    pub fn pick<T>(&self, full: T, smoke: T) -> T {
        if self.full { full } else { smoke }
    }
}

/// What a row promises, as a bound on driver time / our time.
#[derive(Clone, Copy)]
pub enum Target {
    /// No target was set: the figure is for information.
    None,
    /// At least this many times faster than the driver.
    FasterBy(f64),
    /// At most this many percent slower than the driver.
    WithinPercent(f64),
    /// Faster than the driver.
    Faster,
}

impl Target {
    /// The target as the table shows it.
    pub fn text(self) -> String {
        match self {
            Target::None => "-".into(),
            Target::FasterBy(factor) => format!(">= {factor}x faster"),
            Target::WithinPercent(percent) => format!("within {percent}%"),
            Target::Faster => "faster".into(),
        }
    }

    /// Whether `speedup` (driver time / our time) meets the target; `None` without a target.
    pub fn met(self, speedup: f64) -> Option<bool> {
        match self {
            Target::None => None,
            Target::FasterBy(factor) => Some(speedup >= factor),
            Target::WithinPercent(percent) => Some(speedup >= 1.0 / (1.0 + percent / 100.0)),
            Target::Faster => Some(speedup > 1.0),
        }
    }
}

/// One line of the table.
pub struct Row {
    /// The case's number, as the notes name it.
    pub case: &'static str,
    /// What "ours" timed, through the runtime.
    pub ours_label: String,
    /// Median nanoseconds per call.
    pub ours_ns: f64,
    /// What the driver side timed.
    pub driver_label: String,
    /// The driver side's median nanoseconds per call.
    pub driver_ns: f64,
    /// Bytes moved per call, for copies (shown as GB/s too).
    pub bytes: Option<usize>,
    /// What the row promises.
    pub target: Target,
}

/// The table and the notes under it, filled case by case.
#[derive(Default)]
pub struct Report {
    /// The table's lines, in order.
    pub rows: Vec<Row>,
    /// Lines printed under the table.
    pub notes: Vec<String>,
    /// Whether a case failed (the program then exits non-zero).
    pub failed: bool,
}

impl Report {
    /// Adds a line: what ours timed and its median, what the driver side timed and its
    /// median, the bytes per call of a copy, and the target.
    #[allow(clippy::too_many_arguments)]
    pub fn row(
        &mut self,
        case: &'static str,
        ours_label: impl Into<String>,
        ours_ns: f64,
        driver_label: impl Into<String>,
        driver_ns: f64,
        bytes: Option<usize>,
        target: Target,
    ) {
        self.rows.push(Row {
            case,
            ours_label: ours_label.into(),
            ours_ns,
            driver_label: driver_label.into(),
            driver_ns,
            bytes,
            target,
        });
    }

    /// The table in Markdown.
    pub fn table(&self) -> String {
        let mut out = String::from(
            "| case | ours (runtime) | ours median | driver (same run) | driver median | \
             speed-up (driver/ours) | target | met |\n|---|---|---|---|---|---|---|---|\n",
        );
        for row in &self.rows {
            let speedup = row.driver_ns / row.ours_ns;
            let met = match row.target.met(speedup) {
                None => "-",
                Some(true) => "yes",
                Some(false) => "NO",
            };
            out.push_str(&format!(
                "| {} | {} | {} | {} | {} | {:.2}x | {} | {} |\n",
                row.case,
                row.ours_label,
                figure(row.ours_ns, row.bytes),
                row.driver_label,
                figure(row.driver_ns, row.bytes),
                speedup,
                row.target.text(),
                met,
            ));
        }
        out
    }
}

/// A median as text: nanoseconds, microseconds or milliseconds, and GB/s for a copy.
pub fn figure(ns: f64, bytes: Option<usize>) -> String {
    let time = if ns < 1e3 {
        format!("{ns:.1} ns")
    } else if ns < 1e6 {
        format!("{:.2} us", ns / 1e3)
    } else {
        format!("{:.2} ms", ns / 1e6)
    };
    match bytes {
        Some(bytes) => format!("{time} ({:.1} GB/s)", bytes as f64 / ns),
        None => time,
    }
}

/// A size as text (256 B, 64 KiB, 1 MiB).
pub fn size_text(bytes: usize) -> String {
    if bytes >= MIB && bytes.is_multiple_of(MIB) {
        format!("{} MiB", bytes / MIB)
    } else if bytes >= KIB && bytes.is_multiple_of(KIB) {
        format!("{} KiB", bytes / KIB)
    } else {
        format!("{bytes} B")
    }
}

/// Today's date (UTC) as YYYY-MM-DD, from the system clock.
pub fn today() -> String {
    let seconds = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_secs());
    // Days since 1970-01-01 to a civil date (H. Hinnant's days_from_civil, inverted).
    let z = (seconds / 86_400) as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let day_of_era = z - era * 146_097;
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let shifted_month = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * shifted_month + 2) / 5 + 1;
    let month = if shifted_month < 10 {
        shifted_month + 3
    } else {
        shifted_month - 9
    };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}")
}

impl Report {
    /// Prints `header`, the table and the notes, also into the file `HW_BENCH_OUT` names;
    /// returns whether every case passed.
    ///
    /// # Errors
    /// When the file cannot be written.
    pub fn publish(&self, header: &str) -> Outcome<bool> {
        let notes: String = self
            .notes
            .iter()
            .map(|note| format!("- {note}\n"))
            .collect();
        let text = format!("{header}\n{}\n{notes}", self.table());
        print!("{text}");
        if let Ok(path) = std::env::var("HW_BENCH_OUT") {
            std::fs::write(&path, &text).map_err(|error| format!("writing {path}: {error}"))?;
        }
        Ok(!self.failed)
    }
}
