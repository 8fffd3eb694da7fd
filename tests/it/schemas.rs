//! The checked-in `schemas/*.json` must be what the code generates (regenerate with `astra-mcp schemas`),
//! and the limits the schemas state must be the limits the server enforces.

use crate::support::repo;

#[test]
fn checked_in_schemas_match_the_code() {
    let dir = repo().join("schemas");
    let generated = astra_mcp::schema_files();
    let mut on_disk: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".json"))
        .collect();
    on_disk.sort();
    let mut names: Vec<String> = generated.iter().map(|(n, _)| n.clone()).collect();
    names.sort();
    assert_eq!(on_disk, names, "schemas/ has exactly one file per tool");
    for (name, body) in generated {
        let disk = std::fs::read_to_string(dir.join(&name)).unwrap();
        assert_eq!(disk, body, "schemas/{name} drifted: run `astra-mcp schemas` and commit the result");
    }
}
