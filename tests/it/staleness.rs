//! The staleness evaluation (`astra-mcp-dev eval staleness`) on real git repositories: the code check of a
//! stored fix tells *reverted* and *in place* apart from everything else (issue bar: precision and
//! recall ≥ 0.95 each), and a file that is gone is never called in place.

use astra_mcp::eval::staleness;
use astra_mcp::memory::revalidate::CodeState;

#[test]
fn the_code_check_tells_reverted_and_in_place_fixes_apart() {
    let report = staleness::run(6, 7).expect("git repositories in temp dirs");
    assert_eq!(report.cases, 6 * staleness::MOVES.len());
    eprintln!("{}", staleness::render(&report));
    for score in &report.scores {
        if matches!(score.state, CodeState::Reverted | CodeState::InPlace) {
            assert!(score.expected > 0 && score.precision >= 0.95 && score.recall >= 0.95, "{score:?}");
        }
    }
    let gone_in_place = report.results.iter().filter(|r| r.movement == "deleted" && r.got != CodeState::Unknown);
    assert_eq!(gone_in_place.count(), 0, "{}", staleness::render(&report));
}
