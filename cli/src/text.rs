//! Plain-text building blocks of terminal output: a count with its noun, and aligned (or
//! Markdown) tables.

use std::fmt::Write as _;

use crate::args::TableFormat;

/// Units a terminal table lists one by one; past this many, tables list what needs a reader's
/// attention (failing, changed, flaky) and count the rest in one line, so a 1,000-cell sweep
/// does not print a thousand rows.
pub const LISTED_UNITS: usize = 40;

/// `1 job`, `2 jobs`: a count with its noun in the right number (regular plurals).
pub fn count(n: u64, noun: &str) -> String {
    count_of(n, noun, &format!("{noun}s"))
}

/// `1 batch`, `2 batches`: a count with the singular or the plural given.
pub fn count_of(n: u64, one: &str, many: &str) -> String {
    if n == 1 {
        format!("1 {one}")
    } else {
        format!("{n} {many}")
    }
}

/// Prints an aligned text table (columns in `right` right-aligned) or a Markdown table.
pub fn table(
    header: &[&str],
    rows: &[Vec<String>],
    right: &[usize],
    format: TableFormat,
) -> String {
    let mut out = String::new();
    if format == TableFormat::Markdown {
        let escape = |cell: &str| cell.replace('|', "\\|");
        let _ = writeln!(out, "| {} |", header.join(" | "));
        let rule: Vec<&str> = (0..header.len())
            .map(|column| {
                if right.contains(&column) {
                    "---:"
                } else {
                    "---"
                }
            })
            .collect();
        let _ = writeln!(out, "|{}|", rule.join("|"));
        for row in rows {
            let cells: Vec<String> = row.iter().map(|cell| escape(cell)).collect();
            let _ = writeln!(out, "| {} |", cells.join(" | "));
        }
        return out;
    }
    let mut widths: Vec<usize> = header.iter().map(|cell| cell.chars().count()).collect();
    for row in rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let mut line = |cells: &[&str]| {
        let mut text = String::new();
        for (column, (cell, width)) in cells.iter().zip(&widths).enumerate() {
            if column > 0 {
                text.push_str("  ");
            }
            if right.contains(&column) {
                let _ = write!(text, "{cell:>width$}");
            } else {
                let _ = write!(text, "{cell:<width$}");
            }
        }
        let _ = writeln!(out, "{}", text.trim_end());
    };
    line(header);
    for row in rows {
        let cells: Vec<&str> = row.iter().map(String::as_str).collect();
        line(&cells);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_read_right() {
        assert_eq!(count(1, "job"), "1 job");
        assert_eq!(count(0, "file"), "0 files");
        assert_eq!(count_of(2, "batch", "batches"), "2 batches");
    }
}
