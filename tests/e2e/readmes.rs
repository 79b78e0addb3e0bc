//! The READMEs name what the simulator has: every built-in scenario in the
//! project README (where a newcomer picks one for `--simulate`) and in
//! nvml-sim's, and every built-in board in nvml-sim's. The lists come from
//! `nvml-sim scenarios` and `nvml-sim boards`, the data itself, so a
//! scenario or board added without a line in the docs fails here.

use crate::common;

use common::{repo_root, sim_listing};

fn read(path: &str) -> String {
    std::fs::read_to_string(repo_root().join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn missing_from(text: &str, names: &[String]) -> Vec<String> {
    names
        .iter()
        .filter(|n| !text.contains(&format!("`{n}`")))
        .cloned()
        .collect()
}

#[test]
fn the_readmes_name_every_built_in_scenario() {
    let scenarios = sim_listing("scenarios");
    for doc in ["README.md", "nvml-sim/README.md"] {
        let missing = missing_from(&read(doc), &scenarios);
        assert!(
            missing.is_empty(),
            "{doc} does not name the built-in scenarios {missing:?} (nvml-sim scenarios lists them)"
        );
    }
}

#[test]
fn the_simulator_readme_names_every_built_in_board() {
    let boards = sim_listing("boards");
    assert!(boards.len() >= 10, "{boards:?}");
    let missing = missing_from(&read("nvml-sim/README.md"), &boards);
    assert!(
        missing.is_empty(),
        "nvml-sim/README.md does not name the built-in boards {missing:?} (nvml-sim boards lists them)"
    );
}
