//! The overview: counts per table and project, memories added per day (an SVG chart), the last writes,
//! distill runs and their cost, the store's size and upkeep state.

use axum::extract::State;
use axum::response::Response;
use axum_extra::extract::cookie::CookieJar;
use chrono::Utc;
use serde_json::{Value, json};

use super::site::{Ui, failed, page, time, visit};

/// Days the overview's chart covers.
pub const CHART_DAYS: i64 = 30;

/// `/`: counts per table and project, memories added per day, the last writes, distill runs, the store.
pub async fn overview(State(ui): State<Ui>, jar: CookieJar) -> Response {
    let v = match visit(&ui, jar).await {
        Ok(v) => v,
        Err(r) => return r,
    };
    let actor = v.viewer.scope.actor_id.clone();
    let browse = v.memories.browse.clone();
    let census = match browse.census(&actor, 10).await {
        Ok(c) => c,
        Err(e) => return failed(&ui, &e),
    };
    let stats = match browse.table_stats().await {
        Ok(s) => s,
        Err(e) => return failed(&ui, &e),
    };
    let runs = match browse.runs(Some(&actor)).await {
        Ok(r) => r,
        Err(e) => return failed(&ui, &e),
    };
    let today = Utc::now().date_naive();
    let counts: std::collections::HashMap<_, _> = census.per_day.iter().copied().collect();
    let days: Vec<(chrono::NaiveDate, usize)> = (0..CHART_DAYS)
        .rev()
        .map(|back| {
            let day = today - chrono::Duration::days(back);
            (day, counts.get(&day).copied().unwrap_or(0))
        })
        .collect();
    let max = days.iter().map(|d| d.1).max().unwrap_or(0).max(1);
    let (width, height) = (10usize, 100usize);
    let bars: Vec<Value> = days
        .iter()
        .enumerate()
        .map(|(i, (day, n))| {
            let h = (n * height).div_ceil(max);
            json!({"x": i * width, "y": height - h, "w": width - 2, "h": h, "day": day.to_string(), "count": n})
        })
        .collect();
    let total: usize = census.per_project.iter().map(|c| c.2).sum();
    let runs: Vec<Value> = runs
        .iter()
        .rev()
        .take(10)
        .map(|r| {
            json!({
                "run_id": r.run_id, "state": format!("{:?}", r.state).to_lowercase(), "model": r.model,
                "started_at": time(r.started_at), "added": r.added, "updated": r.updated,
                "superseded": r.superseded, "rejected": r.rejected, "cost_usd": format!("{:.4}", r.cost_usd),
                "error": r.error,
            })
        })
        .collect();
    let bytes: usize = stats.iter().map(|s| s.bytes).sum();
    let tables: Vec<Value> = stats
        .iter()
        .map(|s| {
            let pending = s.small_fragments > 1 || s.deleted_rows.unwrap_or(0) > 0;
            json!({
                "table": s.table, "rows": s.rows, "bytes": s.bytes, "fragments": s.fragments,
                "small_fragments": s.small_fragments, "deleted_rows": s.deleted_rows.unwrap_or(0),
                "vector_index_segments": s.vector_index_segments, "versions": s.versions,
                "upkeep": if pending { "pending" } else { "done" },
            })
        })
        .collect();
    let context = json!({
        "total": total,
        "per_project": census.per_project.iter().map(|(t, p, n)| json!({"table": t, "project": p, "rows": n})).collect::<Vec<_>>(),
        "chart": {"bars": bars, "width": CHART_DAYS as usize * width, "height": height, "max": max,
                  "from": days.first().map(|d| d.0.to_string()), "to": today.to_string()},
        "latest": census.latest,
        "runs": runs,
        "store": {"bytes": bytes, "mib": format!("{:.1}", bytes as f64 / 1_048_576.0), "tables": tables},
    });
    page(&ui, v, "overview.html", "/", "Overview", context)
}
