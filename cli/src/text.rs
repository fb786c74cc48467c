//! Plain-text building blocks of terminal output: a count with its noun, and aligned (or
//! Markdown) tables.

use std::fmt::Write as _;

use cowork_core::safe_text::for_terminal;

use crate::args::TableFormat;

/// Units a terminal table lists one by one; past this many, tables list what needs a reader's
/// attention (failing, changed, flaky) and count the rest in one line, so a 1,000-cell sweep
/// does not print a thousand rows.
pub const LISTED_UNITS: usize = 40;

/// Rows the morning view of `cowork diff` and `cowork trend` lists past [`LISTED_UNITS`] (what
/// changed or is flaky, worst first), before `… and N more (--all)`. A matrix cell's label often
/// takes a line of its own above its cells, so each row may take two lines: with the count
/// line, the header and a legend of ten batches, the view stays under 60 lines.
pub const MORNING_ROWS: usize = 15;

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

/// The widest a text table may be: a terminal of 100 columns shows it unwrapped.
pub const MAX_TABLE_WIDTH: usize = 100;

/// The narrowest a label column is cut to when a table is too wide.
const MIN_LABEL_WIDTH: usize = 16;

/// `text` cut to `width` characters by an ellipsis in the middle when it is longer: labels of
/// matrix cells differ at their end as often as at their start
/// (`csv-report [model=…, skill_dir=skills/v2/csv-report]`), so both ends stay.
pub fn truncate(text: &str, width: usize) -> String {
    let n_chars = text.chars().count();
    if n_chars <= width {
        return text.to_owned();
    }
    let kept = width.saturating_sub(1);
    let head = kept.div_ceil(2);
    let tail = kept - head;
    let start: String = text.chars().take(head).collect();
    let end: String = text.chars().skip(n_chars - tail).collect();
    format!("{start}…{end}")
}

/// Prints an aligned text table (columns in `right` right-aligned) or a Markdown table.
///
/// A text table never passes [`MAX_TABLE_WIDTH`]. When the first column (the unit labels) is
/// what makes it too wide, a label that does not fit goes on a line of its own and the row's
/// other cells follow on the next line, so no label loses the part that tells it from the
/// others (matrix cells differ in their axes). Otherwise the widest text columns (a batch's
/// target, a worker's id and tiers) are cut in the middle with an ellipsis, evenly, down to
/// [`MIN_LABEL_WIDTH`]. The
/// Markdown form keeps every row whole.
pub fn table(
    header: &[&str],
    rows: &[Vec<String>],
    right: &[usize],
    format: TableFormat,
) -> String {
    if format == TableFormat::Markdown {
        return markdown_table(header, rows, right);
    }
    text_table(header, rows, right)
}

/// The Markdown form of [`table`]: every row whole, its cells escaped.
fn markdown_table(header: &[&str], rows: &[Vec<String>], right: &[usize]) -> String {
    let mut out = String::new();
    let escape = cowork_core::report::markdown::escape_md;
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
    out
}

/// The text form of [`table`]: aligned, never wider than [`MAX_TABLE_WIDTH`].
fn text_table(header: &[&str], rows: &[Vec<String>], right: &[usize]) -> String {
    let mut out = String::new();
    // Every cell as one safe line: a control character in a worker id or a scenario name
    // cannot start a terminal sequence or forge a row.
    let rows: Vec<Vec<String>> = rows
        .iter()
        .map(|row| row.iter().map(|cell| for_terminal(cell)).collect())
        .collect();
    let rows = rows.as_slice();
    let mut widths: Vec<usize> = header.iter().map(|cell| cell.chars().count()).collect();
    for row in rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let total: usize = widths.iter().sum::<usize>() + 2 * widths.len().saturating_sub(1);
    let widest_label = (0..widths.len())
        .filter(|column| !right.contains(column))
        .max_by_key(|&column| (widths[column], std::cmp::Reverse(column)));
    if total > MAX_TABLE_WIDTH && widest_label == Some(0) && widths.len() > 1 {
        let rest = total - widths[0];
        // The label column as wide as the rest of the table allows (at least its header).
        let inline = MAX_TABLE_WIDTH
            .saturating_sub(rest)
            .max(header.first().map_or(0, |cell| cell.chars().count()));
        if inline < widths[0] && rest + inline <= MAX_TABLE_WIDTH {
            // As wide as the labels that stay inline need, so the cells of a wrapped row do
            // not sit behind an empty column.
            widths[0] = rows
                .iter()
                .filter_map(|row| row.first())
                .map(|label| label.chars().count())
                .filter(|&width| width <= inline)
                .chain(header.first().map(|cell| cell.chars().count()))
                .max()
                .unwrap_or(0);
            return wrapped(header, rows, right, &widths);
        }
    }
    // Too wide otherwise: the widest text column loses a character at a time (cut in the
    // middle), so two long columns (a worker id and its tiers) share the cut instead of one
    // losing everything; none below [`MIN_LABEL_WIDTH`].
    let full = widths.clone();
    let mut total = total;
    while total > MAX_TABLE_WIDTH {
        let widest = (0..widths.len())
            .filter(|column| !right.contains(column))
            .max_by_key(|&column| (widths[column], std::cmp::Reverse(column)));
        match widest {
            Some(column) if widths[column] > MIN_LABEL_WIDTH => {
                widths[column] -= 1;
                total -= 1;
            }
            _ => break,
        }
    }
    let rows: Vec<Vec<String>> = rows
        .iter()
        .map(|row| {
            row.iter()
                .enumerate()
                .map(|(column, cell)| {
                    if widths[column] < full[column] {
                        truncate(cell, widths[column])
                    } else {
                        cell.clone()
                    }
                })
                .collect()
        })
        .collect();
    let mut line = |cells: &[&str]| write_row(&mut out, cells, &widths, right);
    line(header);
    for row in &rows {
        let cells: Vec<&str> = row.iter().map(String::as_str).collect();
        line(&cells);
    }
    out
}

/// One line of a text table: `cells` padded to `widths`, those in `right` right-aligned.
fn write_row(out: &mut String, cells: &[&str], widths: &[usize], right: &[usize]) {
    let mut text = String::new();
    for (column, (cell, width)) in cells.iter().zip(widths).enumerate() {
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
}

/// The text table of [`table`] with the first column `widths[0]` wide: a longer label on a line
/// of its own (cut to [`MAX_TABLE_WIDTH`]), its row's cells on the next.
fn wrapped(header: &[&str], rows: &[Vec<String>], right: &[usize], widths: &[usize]) -> String {
    let mut out = String::new();
    let mut line = |cells: &[&str]| write_row(&mut out, cells, widths, right);
    line(header);
    for row in rows {
        let mut cells: Vec<&str> = row.iter().map(String::as_str).collect();
        let label = cells.first().copied().unwrap_or_default();
        let own_line = label.chars().count() > widths[0];
        if own_line {
            let label = truncate(label, MAX_TABLE_WIDTH);
            line(&[label.as_str()]);
            cells[0] = "";
        }
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

    #[test]
    fn a_text_table_never_passes_100_columns() {
        let label = "csv-report [model=claude-sonnet-4-5-20250929, temperature=0.7, prompt=long]";
        let rows = vec![vec![
            label.to_owned(),
            "PASS 5/5 100%".to_owned(),
            "FAIL 3/5 60%".to_owned(),
            "newly failing".to_owned(),
        ]];
        let text = table(
            &["unit", "then", "now", "change"],
            &rows,
            &[1, 2],
            TableFormat::Text,
        );
        for line in text.lines() {
            assert!(line.chars().count() <= MAX_TABLE_WIDTH, "{line}");
        }
        // The long label keeps a line of its own, whole; its cells follow on the next.
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[1], label, "{text}");
        assert!(lines[2].trim_start().starts_with("PASS 5/5 100%"), "{text}");
        assert_eq!(truncate("abcdefghij", 5), "ab…ij");
        // A wide column that is not the first (a batch's target) is cut in the middle.
        let target = format!("run: {}", "x".repeat(120));
        let cut = table(
            &["batch", "target", "verdict"],
            &[vec![
                "20261201-142139-ba0aff".to_owned(),
                target,
                "PASS".to_owned(),
            ]],
            &[],
            TableFormat::Text,
        );
        for line in cut.lines() {
            assert!(line.chars().count() <= MAX_TABLE_WIDTH, "{line}");
        }
        assert!(cut.contains('…') && cut.contains("PASS"), "{cut}");
        // The batch id keeps its place on the row.
        assert!(
            cut.lines()
                .nth(1)
                .is_some_and(|row| row.starts_with("20261201-142139-ba0aff  run: x")),
            "{cut}"
        );
        // Markdown keeps the label whole.
        let markdown = table(&["unit"], &rows[..1], &[], TableFormat::Markdown);
        assert!(
            markdown.contains(&cowork_core::report::markdown::escape_md(label)),
            "{markdown}"
        );
        // A narrow table is left alone.
        assert_eq!(truncate("short", 16), "short");
    }
}
