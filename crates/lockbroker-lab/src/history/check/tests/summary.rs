//! How the summary names each kind of answer.

use crate::client::Outcome;
use crate::history::check::report;

#[test]
fn the_summary_counts_contended_and_session_lost_answers_apart_from_other_errors() {
    let failed = |status, code: &str| Outcome::Failed {
        status,
        code: code.into(),
    };
    assert_eq!(report::kind(&failed(409, "contended")), "contended");
    assert_eq!(report::kind(&failed(409, "session_lost")), "session_lost");
    assert_eq!(report::kind(&failed(400, "invalid_request")), "other_error");
    assert_eq!(
        report::kind(&failed(503, "backend_unavailable")),
        "unavailable"
    );
    assert_eq!(report::kind(&failed(0, "")), "no_answer");
}
