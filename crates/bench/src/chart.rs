//! The PNG chart of a report: req/s of the shared scenarios for the three servers, and
//! oncerpc's command scenarios with the query baseline.

use std::path::{Path, PathBuf};

use crate::record::Report;

/// Register the chart's font (DejaVu Sans by default, installing fonts-dejavu-core when
/// missing); `false` when there is none, and the chart is drawn without text.
pub fn load_font(explicit: Option<&Path>) -> bool {
    const DEFAULT: &str = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf";
    let path: PathBuf = explicit.map_or_else(|| PathBuf::from(DEFAULT), Path::to_path_buf);
    if explicit.is_none()
        && !path.is_file()
        && let Err(e) = crate::procs::apt_install("fonts-dejavu-core")
    {
        eprintln!("warning: no font for the chart ({e}); drawing it without text");
    }
    let Ok(bytes) = std::fs::read(&path) else {
        eprintln!("warning: cannot read the font {}; the chart has no text", path.display());
        return false;
    };
    let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
    plotters::style::register_font("sans-serif", plotters::style::FontStyle::Normal, bytes).is_ok()
}

const ONCERPC: (u8, u8, u8) = (31, 119, 180);
const JSONRPSEE: (u8, u8, u8) = (255, 127, 14);
const FLOOR: (u8, u8, u8) = (127, 127, 127);
const NEW: (u8, u8, u8) = (44, 160, 44);
const DUP: (u8, u8, u8) = (148, 103, 189);

struct Group {
    label: String,
    bars: Vec<(f64, (u8, u8, u8))>,
}

/// The PNG: req/s per shared scenario for the three servers, and oncerpc's command scenarios
/// with the query baseline.
pub fn chart(rep: &Report, path: &Path, text: bool) -> Result<(), String> {
    use plotters::prelude::*;
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| e.to_string())?;
    }
    let root = BitMapBackend::new(path, (1400, 620)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let rps = |scenario: &str, server: &str| {
        rep.rows
            .iter()
            .find(|r| r.scenario == scenario && r.server == server)
            .map_or(0.0, |r| if r.req_per_s.is_nan() { 0.0 } else { r.req_per_s })
    };
    let mut shared = Vec::new();
    for r in rep.rows.iter().filter(|r| r.shared && r.server == "oncerpc") {
        shared.push(Group {
            label: r.title.clone(),
            // Only the servers that ran it (the edge row is oncerpc's alone).
            bars: [("oncerpc", ONCERPC), ("jsonrpsee", JSONRPSEE), ("floor", FLOOR)]
                .into_iter()
                .map(|(server, color)| (rps(&r.scenario, server), color))
                .filter(|(v, _)| *v > 0.0)
                .collect(),
        });
    }
    let mut own: Vec<Group> = Vec::new();
    for r in rep.rows.iter().filter(|r| !r.shared && !r.is_mcp() && !r.is_unpinned()) {
        let label = if r.scenario.starts_with("flow") {
            "sync flow".to_owned()
        } else {
            match r.server.trim_start_matches("oncerpc (").trim_end_matches(')') {
                "sqlite" => "SQLite".to_owned(),
                "redis" => "Redis".to_owned(),
                "postgres" => "PostgreSQL".to_owned(),
                other => other.to_owned(),
            }
        };
        let color = if r.scenario.contains("dup") { DUP } else { NEW };
        match own.iter_mut().find(|g| g.label == label) {
            Some(g) => g.bars.push((r.req_per_s, color)),
            None => own.push(Group { label, bars: vec![(r.req_per_s, color)] }),
        }
    }
    let baseline = rps(&format!("single-c{}", rep.meta.settings.connections), "oncerpc");
    let (left, right) = root.split_horizontally(if own.is_empty() { 1400 } else { 760 });
    let s = &rep.meta.settings;
    panel(
        &left,
        &format!(
            "req/s, same requests{} (median of {} × {} s)",
            if rep.meta.pinned { ", each server on one core" } else { "" },
            s.reps,
            s.duration
        ),
        &shared,
        &[("oncerpc", ONCERPC), ("jsonrpsee", JSONRPSEE), ("floor (bare hyper)", FLOOR)],
        None,
        text,
    )?;
    if !own.is_empty() {
        panel(
            &right,
            &format!("oncerpc commands, req/s ({} connections)", s.connections),
            &own,
            &[("new key", NEW), ("duplicate key", DUP), ("query `sum`", ONCERPC)],
            Some(baseline),
            text,
        )?;
    }
    root.present().map_err(|e| e.to_string())?;
    Ok(())
}

fn nice_step(max: f64) -> f64 {
    let raw = (max / 5.0).max(1.0);
    let p = 10f64.powf(raw.log10().floor());
    let m = raw / p;
    let k = if m <= 1.0 {
        1.0
    } else if m <= 2.0 {
        2.0
    } else if m <= 2.5 {
        2.5
    } else if m <= 5.0 {
        5.0
    } else {
        10.0
    };
    k * p
}

fn short(x: f64) -> String {
    if x >= 10_000.0 {
        format!("{:.0}k", x / 1000.0)
    } else if x >= 1000.0 {
        format!("{:.1}k", x / 1000.0)
    } else {
        format!("{x:.0}")
    }
}

fn panel<DB: plotters::prelude::DrawingBackend>(
    area: &plotters::prelude::DrawingArea<DB, plotters::coord::Shift>,
    title: &str,
    groups: &[Group],
    legend: &[(&str, (u8, u8, u8))],
    baseline: Option<f64>,
    text: bool,
) -> Result<(), String> {
    use plotters::prelude::*;
    use plotters::style::text_anchor::{HPos, Pos, VPos};
    let err = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
    let (w, h) = area.dim_in_pixel();
    let (w, h) = (w as i32, h as i32);
    let (left, right, top, bottom) = (70, 20, 80, 70);
    let plot_h = h - top - bottom;
    let max = groups
        .iter()
        .flat_map(|g| g.bars.iter().map(|b| b.0))
        .chain(baseline)
        .filter(|x| !x.is_nan())
        .fold(0.0, f64::max);
    let step = nice_step(max * 1.08);
    let top_value = ((max * 1.08) / step).ceil().max(1.0) * step;
    let y_of = |v: f64| top + plot_h - ((v / top_value) * plot_h as f64).round() as i32;
    let font = |size: f64| ("sans-serif", size).into_font();
    let grey = RGBColor(220, 220, 220);
    let mut v = 0.0;
    while v <= top_value + 0.5 {
        let y = y_of(v);
        area.draw(&PathElement::new(vec![(left, y), (w - right, y)], grey)).map_err(err)?;
        if text {
            let style = font(13.0).color(&BLACK).pos(Pos::new(HPos::Right, VPos::Center));
            area.draw(&Text::new(short(v), (left - 6, y), style)).map_err(err)?;
        }
        v += step;
    }
    area.draw(&PathElement::new(vec![(left, top), (left, top + plot_h), (w - right, top + plot_h)], BLACK))
        .map_err(err)?;
    if text {
        let style = font(18.0).color(&BLACK).pos(Pos::new(HPos::Left, VPos::Top));
        area.draw(&Text::new(title.to_owned(), (left, 10), style)).map_err(err)?;
        let mut x = left;
        for (name, (r, g, b)) in legend {
            area.draw(&Rectangle::new([(x, 45), (x + 14, 59)], RGBColor(*r, *g, *b).filled()))
                .map_err(err)?;
            let style = font(14.0).color(&BLACK).pos(Pos::new(HPos::Left, VPos::Center));
            area.draw(&Text::new((*name).to_owned(), (x + 20, 52), style)).map_err(err)?;
            x += 40 + 8 * name.len() as i32;
        }
    }
    if groups.is_empty() {
        return Ok(());
    }
    let slot = (w - left - right) / groups.len() as i32;
    for (gi, g) in groups.iter().enumerate() {
        let x0 = left + gi as i32 * slot;
        let n = g.bars.len().max(1) as i32;
        let bar_w = ((slot - 30) / n).clamp(8, 90);
        let start = x0 + (slot - bar_w * n) / 2;
        for (bi, (value, (r, gg, b))) in g.bars.iter().enumerate() {
            let value = if value.is_nan() { 0.0 } else { *value };
            let bx = start + bi as i32 * bar_w;
            let y = y_of(value);
            area.draw(&Rectangle::new(
                [(bx + 2, y), (bx + bar_w - 2, top + plot_h)],
                RGBColor(*r, *gg, *b).filled(),
            ))
            .map_err(err)?;
            if text {
                let style = font(12.0).color(&BLACK).pos(Pos::new(HPos::Center, VPos::Bottom));
                area.draw(&Text::new(short(value), (bx + bar_w / 2, y - 3), style)).map_err(err)?;
            }
        }
        if text {
            // Group labels, wrapped on two lines at most.
            let words: Vec<&str> = g.label.split(' ').collect();
            let per_line = ((slot - 10) / 8).max(8) as usize;
            let mut lines = vec![String::new()];
            for word in words {
                let cur = lines.last_mut().expect("one line");
                if !cur.is_empty() && cur.len() + 1 + word.len() > per_line {
                    lines.push(word.to_owned());
                } else {
                    if !cur.is_empty() {
                        cur.push(' ');
                    }
                    cur.push_str(word);
                }
            }
            for (li, line) in lines.iter().take(3).enumerate() {
                let style = font(13.0).color(&BLACK).pos(Pos::new(HPos::Center, VPos::Top));
                area.draw(&Text::new(
                    line.clone(),
                    (x0 + slot / 2, top + plot_h + 8 + 17 * li as i32),
                    style,
                ))
                .map_err(err)?;
            }
        }
    }
    if let Some(b) = baseline.filter(|b| *b > 0.0) {
        let y = y_of(b);
        let (r, g, bl) = ONCERPC;
        let color = RGBColor(r, g, bl);
        let mut x = left;
        while x < w - right {
            area.draw(&PathElement::new(vec![(x, y), ((x + 10).min(w - right), y)], color.stroke_width(2)))
                .map_err(err)?;
            x += 16;
        }
        if text {
            let style = font(13.0).color(&color).pos(Pos::new(HPos::Right, VPos::Bottom));
            area.draw(&Text::new(format!("query `sum` {}", short(b)), (w - right - 4, y - 3), style))
                .map_err(err)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_axis_numbers() {
        assert_eq!(short(42_397.0), "42k");
        assert_eq!(short(4_239.0), "4.2k");
        assert_eq!(nice_step(47_000.0), 10_000.0);
        assert_eq!(nice_step(100.0), 20.0);
    }
}
