//! MLflow's search syntax: scenario tables for filters and orders, error messages, and
//! fuzzing (arbitrary text and near-valid mutations never panic; AND is conjunction;
//! orders are total).

use super::conditions::like;
use super::*;
use proptest::prelude::*;
use std::cmp::Ordering;

fn strings(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn numbers(pairs: &[(&str, f64)]) -> BTreeMap<String, f64> {
    pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect()
}

/// Four runs that between them have every kind of value, gap and tie the tables need.
fn runs() -> Vec<RunRecord> {
    vec![
        RunRecord {
            run_id: "r1".into(),
            run_name: Some("alpha-1".into()),
            experiment_id: "1".into(),
            user: "alice".into(),
            status: "FINISHED".into(),
            start_time: Some(1000),
            end_time: Some(2000),
            artifact_uri: "file:///a/r1".into(),
            lifecycle_stage: "active".into(),
            params: strings(&[("lr", "0.01"), ("opt", "adam"), ("model", "ResNet-50")]),
            tags: strings(&[
                ("mlflow.runName", "alpha-1"),
                ("team", "vision"),
                ("my tag", "x y"),
            ]),
            metrics: numbers(&[("acc", 0.91), ("loss", 0.3), ("val loss", 0.35)]),
        },
        RunRecord {
            run_id: "r2".into(),
            run_name: Some("beta".into()),
            experiment_id: "1".into(),
            user: "bob".into(),
            status: "RUNNING".into(),
            start_time: Some(3000),
            end_time: None,
            artifact_uri: "s3://b/r2".into(),
            lifecycle_stage: "active".into(),
            params: strings(&[("lr", "0.1"), ("opt", "sgd")]),
            tags: strings(&[("team", "nlp"), ("note", "it's")]),
            metrics: numbers(&[("acc", 0.85), ("loss", f64::NAN)]),
        },
        RunRecord {
            run_id: "r3".into(),
            run_name: None,
            experiment_id: "2".into(),
            user: "alice".into(),
            status: "FAILED".into(),
            start_time: None,
            end_time: None,
            artifact_uri: "file:///a/r3".into(),
            lifecycle_stage: "deleted".into(),
            params: strings(&[("lr", "0.01"), ("batch", "32")]),
            tags: strings(&[("team", "Vision"), ("ünïcode", "Ärger")]),
            metrics: numbers(&[("acc", -1.5), ("steps", 1e6)]),
        },
        RunRecord {
            run_id: "r4".into(),
            run_name: Some("alpha-2".into()),
            experiment_id: "2".into(),
            user: "carol".into(),
            status: "KILLED".into(),
            start_time: Some(1000),
            end_time: Some(5000),
            artifact_uri: "file:///b/r4".into(),
            lifecycle_stage: "active".into(),
            params: BTreeMap::new(),
            tags: BTreeMap::new(),
            metrics: numbers(&[("acc", 0.91), ("loss", 0.2)]),
        },
    ]
}

fn matching(filter: &str) -> Result<Vec<String>, SearchError> {
    let f = parse_run_filter(filter)?;
    Ok(runs()
        .iter()
        .filter(|r| f.matches(r))
        .map(|r| r.run_id.clone())
        .collect())
}

#[test]
fn run_filter_scenarios() {
    #[rustfmt::skip]
    let cases: &[(&str, &[&str])] = &[
        // Everything.
        ("", &["r1", "r2", "r3", "r4"]),
        ("   ", &["r1", "r2", "r3", "r4"]),
        ("\n\t ", &["r1", "r2", "r3", "r4"]),
        // Metrics: every comparator, number forms, missing keys, NaN.
        ("metrics.acc > 0.9", &["r1", "r4"]),
        ("metrics.acc >= 0.91", &["r1", "r4"]),
        ("metrics.acc = 0.91", &["r1", "r4"]),
        ("metrics.acc != 0.91", &["r2", "r3"]),
        ("metrics.acc < 0", &["r3"]),
        ("metrics.acc <= -1.5", &["r3"]),
        ("metrics.acc > -1.5e0", &["r1", "r2", "r4"]),
        ("metric.acc > .9", &["r1", "r4"]),
        ("metrics.acc>0.9", &["r1", "r4"]),
        ("metrics.steps >= 1e6", &["r3"]),
        ("metrics.steps = 1000000", &["r3"]),
        ("metrics.steps < 1E+7", &["r3"]),
        ("metrics.loss = 0.3", &["r1"]),
        ("metrics.loss < 1", &["r1", "r4"]),
        ("metrics.loss >= -1e300", &["r1", "r4"]),
        ("metrics.loss != 0.3", &["r2", "r4"]),
        ("metrics.nope > 0", &[]),
        ("metrics.nope != 0", &[]),
        ("metrics.`val loss` < 0.4", &["r1"]),
        ("metrics.\"val loss\" < 0.4", &["r1"]),
        // Params: prefixes, quotes, LIKE and ILIKE wildcards, NULL tests.
        ("params.lr = '0.01'", &["r1", "r3"]),
        ("params.lr = \"0.01\"", &["r1", "r3"]),
        ("params.lr != '0.01'", &["r2"]),
        ("param.opt = 'adam'", &["r1"]),
        ("parameter.opt = 'sgd'", &["r2"]),
        ("parameters.opt != 'sgd'", &["r1"]),
        ("params.model LIKE 'ResNet%'", &["r1"]),
        ("params.model LIKE 'resnet%'", &[]),
        ("params.model ILIKE 'resnet%'", &["r1"]),
        ("params.model LIKE '%-5_'", &["r1"]),
        ("params.model LIKE 'ResNet'", &[]),
        ("params.lr LIKE '0.0_'", &["r1", "r3"]),
        ("params.lr LIKE '0._'", &["r2"]),
        ("params.lr LIKE '%1'", &["r1", "r2", "r3"]),
        ("params.lr LIKE '%'", &["r1", "r2", "r3"]),
        ("params.lr like '0.01'", &["r1", "r3"]),
        ("params.lr IS NULL", &["r4"]),
        ("params.batch IS NOT NULL", &["r3"]),
        ("params.lr is not null", &["r1", "r2", "r3"]),
        ("params.lr Is  Null", &["r4"]),
        // Tags: dotted and quoted keys, case, escapes, unicode.
        ("tags.team = 'vision'", &["r1"]),
        ("tags.team ILIKE 'vision'", &["r1", "r3"]),
        ("tags.team LIKE 'V%'", &["r3"]),
        ("tags.team != 'nlp'", &["r1", "r3"]),
        ("tag.team IS NULL", &["r4"]),
        ("tags.mlflow.runName = 'alpha-1'", &["r1"]),
        ("tags.\"mlflow.runName\" LIKE \"alpha%\"", &["r1"]),
        ("tags.`my tag` = 'x y'", &["r1"]),
        ("tags.'my tag' = 'x y'", &["r1"]),
        ("tags.`my-tag` IS NULL", &["r1", "r2", "r3", "r4"]),
        ("tags.note = 'it''s'", &["r2"]),
        ("tags.note = 'it\\'s'", &["r2"]),
        ("tags.note = \"it's\"", &["r2"]),
        ("tags.ünïcode ILIKE 'ä%'", &["r3"]),
        ("tags.ünïcode LIKE 'ä%'", &[]),
        // Attributes: text ones, aliases, prefixes, lists.
        ("attributes.status = 'RUNNING'", &["r2"]),
        ("status != 'RUNNING'", &["r1", "r3", "r4"]),
        ("attr.status LIKE 'F%'", &["r1", "r3"]),
        ("run.status ILIKE 'f%'", &["r1", "r3"]),
        ("attribute.status = 'running'", &[]),
        ("status ilike 'finished'", &["r1"]),
        ("run_id = 'r2'", &["r2"]),
        ("run_id IN ('r1', 'r3')", &["r1", "r3"]),
        ("run_id NOT IN ('r1','r3')", &["r2", "r4"]),
        ("run_id in ('r4',)", &["r4"]),
        ("run_id not   in (\"r2\")", &["r1", "r3", "r4"]),
        ("run_id LIKE 'r%'", &["r1", "r2", "r3", "r4"]),
        ("run_name = 'beta'", &["r2"]),
        ("run_name LIKE 'alpha%'", &["r1", "r4"]),
        ("run_name != 'beta'", &["r1", "r4"]),
        ("attributes.`Run name` = 'beta'", &["r2"]),
        ("\"run name\" = 'beta'", &["r2"]),
        ("`run_id` = 'r1'", &["r1"]),
        ("`attributes`.run_id = 'r1'", &["r1"]),
        ("user_id = 'alice'", &["r1", "r3"]),
        ("artifact_uri LIKE 'file:///a/%'", &["r1", "r3"]),
        ("lifecycle_stage = 'deleted'", &["r3"]),
        // Attributes: times (a run without one never matches).
        ("start_time = 1000", &["r1", "r4"]),
        ("start_time > 1000", &["r2"]),
        ("start_time != 1000", &["r2"]),
        ("created >= 1000", &["r1", "r2", "r4"]),
        ("Created < 1001", &["r1", "r4"]),
        ("attributes.start_time < 2000.5", &["r1", "r4"]),
        ("end_time != 2000", &["r4"]),
        ("end_time <= 5000", &["r1", "r4"]),
        // AND chaining, keyword case, spacing.
        ("metrics.acc > 0.8 AND params.opt = 'adam'", &["r1"]),
        ("metrics.acc > 0.8 and tags.team = 'nlp'", &["r2"]),
        ("metrics.acc > 0.8 AnD status = 'KILLED'", &["r4"]),
        ("params.lr like '0.0%' AND user_id = 'alice' AND lifecycle_stage = 'active'", &["r1"]),
        ("  metrics.acc > 0.9  ", &["r1", "r4"]),
        ("metrics.acc>0.5\nAND\tparams.lr='0.1'", &["r2"]),
        ("params.lr = '0.01' AND params.lr = '0.1'", &[]),
        ("run_id IN ('r1','r2') AND tags.note IS NULL", &["r1"]),
        ("run_id IN ('r3','r4') AND params.lr IS NULL", &["r4"]),
    ];
    let mut failures = Vec::new();
    for (filter, want) in cases {
        match matching(filter) {
            Ok(got) if got == *want => {}
            Ok(got) => failures.push(format!("{filter:?}: got {got:?}, want {want:?}")),
            Err(e) => failures.push(format!("{filter:?}: error {e}")),
        }
    }
    assert!(failures.is_empty(), "\n{}", failures.join("\n"));
}

#[test]
fn number_literals() {
    let cases = [
        ("5", 5.0),
        ("-5", -5.0),
        ("5.", 5.0),
        (".5", 0.5),
        ("-.5", -0.5),
        ("1e3", 1000.0),
        ("1E+3", 1000.0),
        ("-1.5e-3", -0.0015),
        ("007", 7.0),
        ("99999999999999999999", 1e20),
    ];
    for (text, value) in cases {
        let f = parse_run_filter(&format!("metrics.x = {text}"))
            .unwrap_or_else(|e| panic!("{text}: {e}"));
        let run = RunRecord {
            metrics: numbers(&[("x", value)]),
            ..RunRecord::default()
        };
        assert!(f.matches(&run), "{text} should equal {value}");
    }
}

#[test]
fn like_wildcards() {
    assert!(like("", "", false));
    assert!(like("", "%", false));
    assert!(!like("", "_", false));
    assert!(like("abc", "a%", false));
    assert!(like("abc", "%c", false));
    assert!(like("abc", "%b%", false));
    assert!(like("abc", "a_c", false));
    assert!(!like("abc", "a_", false));
    assert!(like("a\nb", "a_b", false));
    assert!(like("ABC", "a%", true));
    assert!(!like("ABC", "a%", false));
    assert!(like("a.c", "a.c", false));
    assert!(!like("abc", "a.c", false));
    assert!(like("mississippi", "%iss%ppi", false));
    // A pattern built to backtrack stays linear-ish: this returns at once.
    let long = "a".repeat(20_000);
    assert!(!like(&long, "%a%a%a%a%a%b", false));
}

fn order(clauses: &[&str]) -> Result<Vec<String>, SearchError> {
    let clauses: Vec<String> = clauses.iter().map(|s| s.to_string()).collect();
    let o = parse_run_order(&clauses)?;
    let mut rs = runs();
    rs.sort_by(|a, b| o.compare(a, b));
    Ok(rs.into_iter().map(|r| r.run_id).collect())
}

#[test]
fn run_order_scenarios() {
    #[rustfmt::skip]
    let cases: &[(&[&str], &[&str])] = &[
        // start_time DESC (r3 has none: last), then run_id ASC for r1/r4.
        (&[], &["r2", "r1", "r4", "r3"]),
        (&["created DESC"], &["r2", "r1", "r4", "r3"]),
        (&["start_time ASC"], &["r1", "r4", "r2", "r3"]),
        (&["attributes.start_time desc"], &["r2", "r1", "r4", "r3"]),
        // The tie r1/r4 on acc goes to start_time DESC (equal), then run_id.
        (&["metrics.acc DESC"], &["r1", "r4", "r2", "r3"]),
        (&["metrics.acc"], &["r3", "r2", "r1", "r4"]),
        (&["metrics.acc Asc"], &["r3", "r2", "r1", "r4"]),
        // Numbers, then NaN (r2), then missing (r3), both ways.
        (&["metrics.loss ASC"], &["r4", "r1", "r2", "r3"]),
        (&["metrics.loss DESC"], &["r1", "r4", "r2", "r3"]),
        // Missing in all but r1: the rest by start_time DESC, r3 (no start) last.
        (&["metrics.`val loss` DESC"], &["r1", "r2", "r4", "r3"]),
        // Params are strings: "0.1" > "0.01"; r4 has none.
        (&["params.lr DESC"], &["r2", "r1", "r3", "r4"]),
        (&["params.lr ASC"], &["r1", "r3", "r2", "r4"]),
        // Byte order: "Vision" < "nlp" < "vision".
        (&["tags.team"], &["r3", "r2", "r1", "r4"]),
        (&["tags.team DESC"], &["r1", "r2", "r3", "r4"]),
        (&["end_time DESC"], &["r4", "r1", "r2", "r3"]),
        (&["end_time ASC"], &["r1", "r4", "r2", "r3"]),
        (&["run_name"], &["r1", "r4", "r2", "r3"]),
        (&["run_name DESC"], &["r2", "r4", "r1", "r3"]),
        (&["attributes.status DESC"], &["r2", "r4", "r1", "r3"]),
        (&["user_id", "metrics.acc ASC"], &["r3", "r1", "r2", "r4"]),
        (&["user_id", "metrics.acc DESC"], &["r1", "r3", "r2", "r4"]),
        (&["run_id DESC"], &["r4", "r3", "r2", "r1"]),
        (&["lifecycle_stage DESC", "run_id"], &["r3", "r1", "r2", "r4"]),
        (&["  metrics.acc   DESC  "], &["r1", "r4", "r2", "r3"]),
        (&["metrics.'acc' DESC"], &["r1", "r4", "r2", "r3"]),
        (&["metrics.\"acc\" DESC"], &["r1", "r4", "r2", "r3"]),
    ];
    let mut failures = Vec::new();
    for (clauses, want) in cases {
        match order(clauses) {
            Ok(got) if got == *want => {}
            Ok(got) => failures.push(format!("{clauses:?}: got {got:?}, want {want:?}")),
            Err(e) => failures.push(format!("{clauses:?}: error {e}")),
        }
    }
    assert!(failures.is_empty(), "\n{}", failures.join("\n"));
}

#[test]
fn default_orders_equal_parsing_nothing() {
    assert_eq!(parse_run_order(&[]).unwrap(), RunOrder::default());
    assert_eq!(
        parse_experiment_order(&[]).unwrap(),
        ExperimentOrder::default()
    );
    assert_eq!(parse_run_filter("").unwrap(), RunFilter::default());
    assert_eq!(
        parse_experiment_filter(" ").unwrap(),
        ExperimentFilter::default()
    );
}

fn experiments() -> Vec<ExperimentRecord> {
    let e = |id: &str, name: &str, created: i64, updated: i64, tags: &[(&str, &str)]| {
        ExperimentRecord {
            experiment_id: id.into(),
            name: name.into(),
            lifecycle_stage: "active".into(),
            creation_time: created,
            last_update_time: updated,
            tags: strings(tags),
        }
    };
    vec![
        e("0", "Default", 100, 500, &[]),
        e(
            "1",
            "vision/resnet",
            200,
            300,
            &[("team", "vision"), ("priority", "high")],
        ),
        e("2", "nlp/bert", 200, 900, &[("team", "nlp")]),
        e("10", "Vision/ViT", 50, 50, &[("team", "Vision")]),
    ]
}

#[test]
fn experiment_filter_scenarios() {
    #[rustfmt::skip]
    let cases: &[(&str, &[&str])] = &[
        ("", &["0", "1", "2", "10"]),
        ("name = 'Default'", &["0"]),
        ("name != 'Default'", &["1", "2", "10"]),
        ("name LIKE 'vision/%'", &["1"]),
        ("name ILIKE 'vision/%'", &["1", "10"]),
        ("attribute.name LIKE '%/%'", &["1", "2", "10"]),
        ("tags.team = 'vision'", &["1"]),
        ("tag.team ILIKE 'VISION'", &["1", "10"]),
        ("tags.team != 'nlp'", &["1", "10"]),
        ("tags.team LIKE '%i%'", &["1", "10"]),
        ("tags.priority IS NULL", &["0", "2", "10"]),
        ("tags.priority IS NOT NULL", &["1"]),
        ("creation_time = 200", &["1", "2"]),
        ("creation_time > 100", &["1", "2"]),
        ("last_update_time <= 300", &["1", "10"]),
        ("creation_time >= 50 and last_update_time > 400", &["0", "2"]),
        ("experiment_id = '10'", &["10"]),
        ("experiment_id = \"010\"", &["10"]),
        ("experiment_id != '1'", &["0", "2", "10"]),
        ("experiment_id IN ('1','2')", &["1", "2"]),
        ("experiment_id NOT IN ('0')", &["1", "2", "10"]),
        ("name LIKE '%i%' AND tags.team != 'vision'", &["10"]),
    ];
    let mut failures = Vec::new();
    for (filter, want) in cases {
        let got: Result<Vec<String>, _> = parse_experiment_filter(filter).map(|f| {
            experiments()
                .into_iter()
                .filter(|e| f.matches(e))
                .map(|e| e.experiment_id)
                .collect()
        });
        match got {
            Ok(got) if got == *want => {}
            Ok(got) => failures.push(format!("{filter:?}: got {got:?}, want {want:?}")),
            Err(e) => failures.push(format!("{filter:?}: error {e}")),
        }
    }
    assert!(failures.is_empty(), "\n{}", failures.join("\n"));
}

#[test]
fn experiment_order_scenarios() {
    #[rustfmt::skip]
    let cases: &[(&[&str], &[&str])] = &[
        // creation_time DESC, then experiment_id ASC.
        (&[], &["1", "2", "0", "10"]),
        (&["name"], &["0", "10", "2", "1"]),
        (&["name DESC"], &["1", "2", "10", "0"]),
        // Numerically: 10 after 2.
        (&["experiment_id"], &["0", "1", "2", "10"]),
        (&["experiment_id DESC"], &["10", "2", "1", "0"]),
        // After explicit clauses MLflow breaks ties by experiment_id DESC.
        (&["creation_time ASC"], &["10", "0", "2", "1"]),
        (&["creation_time DESC"], &["2", "1", "0", "10"]),
        (&["creation_time DESC", "experiment_id ASC"], &["1", "2", "0", "10"]),
        (&["attribute.last_update_time DESC"], &["2", "0", "1", "10"]),
    ];
    let mut failures = Vec::new();
    for (clauses, want) in cases {
        let clauses: Vec<String> = clauses.iter().map(|s| s.to_string()).collect();
        let got: Result<Vec<String>, _> = parse_experiment_order(&clauses).map(|o| {
            let mut es = experiments();
            es.sort_by(|a, b| o.compare(a, b));
            es.into_iter().map(|e| e.experiment_id).collect()
        });
        match got {
            Ok(got) if got == *want => {}
            Ok(got) => failures.push(format!("{clauses:?}: got {got:?}, want {want:?}")),
            Err(e) => failures.push(format!("{clauses:?}: error {e}")),
        }
    }
    assert!(failures.is_empty(), "\n{}", failures.join("\n"));
}

/// Each error must contain the given text; it is also its Display.
fn check_errors(
    kind: &str,
    cases: &[(&str, &str)],
    parse: impl Fn(&str) -> Result<(), SearchError>,
) {
    let mut failures = Vec::new();
    for (input, want) in cases {
        match parse(input) {
            Ok(()) => failures.push(format!(
                "{kind} {input:?}: parsed, want an error with {want:?}"
            )),
            Err(e) if e.message.contains(want) && e.to_string() == e.message => {}
            Err(e) => failures.push(format!("{kind} {input:?}: {:?} lacks {want:?}", e.message)),
        }
    }
    assert!(failures.is_empty(), "\n{}", failures.join("\n"));
}

#[test]
fn run_filter_errors() {
    #[rustfmt::skip]
    let cases: &[(&str, &str)] = &[
        ("metrics.acc > 0.9 OR metrics.loss < 1",
            "Invalid clause(s) in filter string: 'OR' at column 19. OR is not supported; join clauses with AND"),
        ("params.lr = 'a' or params.lr = 'b'", "'OR' at column 17"),
        ("OR metrics.acc > 1", "'OR' at column 1"),
        ("foo = 'x'", "Invalid attribute key 'foo' specified. Valid keys are ['artifact_uri', 'created', 'end_time', 'lifecycle_stage', 'run_id', 'run_name', 'start_time', 'status', 'user_id']"),
        ("attributes.experiment_id = '1'", "Invalid attribute key 'experiment_id'"),
        ("params.lr = 0.01", "Expected a quoted string value for param 'lr' (e.g. 'my-value'). Got value 0.01"),
        ("params.lr = abc", "Value for param 'lr' is either not quoted or unidentified quote types used for string value abc. Use either single or double quotes."),
        ("params.lr = `0.01`", "unidentified quote types used for string value `0.01`"),
        ("tags.team = vision", "Value for tag 'team' is either not quoted"),
        ("params.lr > '1'", "Invalid comparator '>' for param 'lr' in clause 'params.lr > '1''; valid comparators are ['=', '!=', 'LIKE', 'ILIKE', 'IS NULL', 'IS NOT NULL']"),
        ("tags.team >= 'a'", "Invalid comparator '>=' for tag 'team'"),
        ("status > 'x'", "Invalid comparator '>' for string attribute 'status' in clause 'status > 'x''; valid comparators are ['=', '!=', 'LIKE', 'ILIKE']"),
        ("start_time LIKE '1%'", "Invalid comparator 'LIKE' for numeric attribute 'start_time'"),
        ("end_time IN ('1')", "Invalid comparator 'IN' for numeric attribute 'end_time'"),
        ("start_time > '5'", "Expected numeric value type for numeric attribute: start_time. Found '5'"),
        ("metrics.acc > 'x'", "Expected numeric value type for metric. Found 'x'"),
        ("metrics.acc > 1abc", "Expected numeric value type for metric. Found 1abc"),
        ("metrics.acc > 1.2.3", "Found 1.2.3"),
        ("metrics.acc > nan", "Found nan"),
        ("metrics.acc LIKE '1'", "Invalid comparator 'LIKE' for metric 'acc'"),
        ("metrics.acc == 1", "Invalid comparator '==' for metric 'acc'"),
        ("metrics.acc <> 1", "Invalid comparator '<>'"),
        ("params.a NOT LIKE 'x'", "Invalid comparator 'NOT LIKE' for param 'a'"),
        ("params.a RLIKE 'x'", "Invalid comparator 'RLIKE' for param 'a'"),
        ("params.lr IN ('a')", "Invalid comparator 'IN' for param 'lr'"),
        ("metrics.acc IS NULL", "IS NULL / IS NOT NULL is only supported for tags and params, not for 'metric' 'acc'"),
        ("status IS NOT NULL", "not for 'attribute' 'status'"),
        ("params.lr = 'unterminated", "Invalid clause(s) in filter string: unterminated quoted string starting at column 13; close it with '"),
        ("params.lr = \"open", "unterminated quoted string starting at column 13; close it with \""),
        ("metrics.`acc > 1", "unterminated quoted name starting at column 9; close it with `"),
        ("tags.a = 'x\\'", "unterminated quoted string starting at column 10"),
        ("metrics.acc > 0.9 garbage", "Invalid clause(s) in filter string: unexpected 'garbage' at column 19 after 'metrics.acc > 0.9'; join clauses with AND"),
        ("metrics.acc > 1 metrics.loss < 1", "unexpected 'metrics.loss' at column 17"),
        ("metrics.acc > 0.9; metrics.loss < 1", "Search filter contained multiple expressions (';' at column 18)"),
        ("metrics.acc > 0.9;", "multiple expressions"),
        ("Metrics.acc > 1", "Invalid entity type 'Metrics'. Valid values are ['metric', 'parameter', 'tag', 'attribute']"),
        ("\"metrics\".acc > 1", "Invalid entity type '\"metrics\"'"),
        ("datasets.name = 'x'", "Invalid identifier 'datasets.name': searching runs by dataset is not supported"),
        ("dataset.digest = 'x'", "searching runs by dataset is not supported"),
        ("status IN ('a')", "Only ['run_id'] attributes support comparison with a list of quoted string values."),
        ("run_id IN ()", "while parsing a list in the query, expected a non-empty list of string values, but got empty list at column 11"),
        ("run_id IN ('a', 1)", "expected a quoted string value at column 17, found '1)'"),
        ("run_id IN ('a' 'b')", "expected ',' or ')' at column 16"),
        ("run_id IN ('a',,)", "expected a quoted string value at column 16"),
        ("run_id IN ('a'", "the '(' at column 11 is never closed"),
        ("run_id IN ('a',", "the '(' at column 11 is never closed"),
        ("run_id = ('a')", "Invalid clause 'run_id = ('a')': a list of values needs IN or NOT IN, not '='"),
        ("run_id IN 'a'", "Expected a list of quoted string values after IN for string attribute 'run_id'"),
        ("metrics.acc", "expected a comparator (=, !=, <, <=, >, >=, LIKE, ILIKE, IN, NOT IN, IS NULL, IS NOT NULL) after 'metrics.acc' at column 12, found the end of the text"),
        ("metrics.acc 1", "after 'metrics.acc' at column 13, found '1'"),
        ("tags.my-tag = 'x'", "after 'tags.my' at column 8, found '-tag'; quote a key with other characters in backticks, e.g. tags.`my-tag`"),
        ("metrics.acc >", "missing a value after 'metrics.acc >' at column 14"),
        ("metrics.acc > -", "expected a value after 'metrics.acc >' at column 15, found '-'"),
        ("metrics. > 1", "expected a key after 'metrics.' at column 9, found whitespace"),
        ("metrics.>1", "expected a key after 'metrics.' at column 9, found '>1'"),
        ("tags.`` = 'x'", "empty key in 'tags.``'"),
        ("\"\" = 'x'", "empty name at column 1"),
        ("= 'x'", "expected an identifier such as metrics.acc, params.lr or tags.team at column 1, found '='"),
        ("tags.`a b`.c = 'x'", "unexpected '.c' at column 11 after the quoted key in 'tags.`a b`'; quote the whole key"),
        ("metrics.acc > 1 AND", "the filter ends with AND"),
        ("metrics.acc > 1 AND   ", "the filter ends with AND"),
        ("AND metrics.acc > 1", "unexpected 'AND' at column 1; expected a clause such as metrics.acc > 0.9"),
        ("metrics.acc > 1 AND AND metrics.loss < 1", "unexpected 'AND' at column 21"),
        ("(metrics.acc > 1)", "parentheses are not supported (at column 1)"),
        ("metrics.acc > 1 AND (params.a = 'x')", "parentheses are not supported (at column 21)"),
        ("params.a IS 'x'", "expected NULL or NOT NULL after IS at column 13, found ''x''"),
        ("params.a IS NOT 'x'", "expected NULL after IS NOT at column 17"),
        ("params.a NOT 'x'", "expected IN after NOT at column 14"),
        ("params.a = 'x' AND ünknown.k = 'y'", "Invalid entity type 'ünknown'"),
    ];
    check_errors("run filter", cases, |s| parse_run_filter(s).map(drop));
}

#[test]
fn size_limits() {
    let long = format!("params.a = '{}'", "x".repeat(MAX_SEARCH_TEXT_BYTES));
    let e = parse_run_filter(&long).unwrap_err();
    assert!(
        e.message
            .starts_with("Filter string is too long: 65549 bytes; at most 65536"),
        "{e}"
    );
    assert!(parse_experiment_filter(&long).is_err());
    let just_fits = format!("params.a = '{}'", "x".repeat(MAX_SEARCH_TEXT_BYTES - 13));
    assert_eq!(just_fits.len(), MAX_SEARCH_TEXT_BYTES);
    assert!(parse_run_filter(&just_fits).is_ok());

    let many: Vec<String> = (0..=MAX_ORDER_BY_CLAUSES)
        .map(|i| format!("metrics.m{i}"))
        .collect();
    let e = parse_run_order(&many).unwrap_err();
    assert_eq!(
        e.message,
        "Invalid order_by: 101 clauses; at most 100 are allowed"
    );
    assert!(parse_experiment_order(&many).is_err());
    assert!(parse_run_order(&many[..MAX_ORDER_BY_CLAUSES]).is_ok());
    let huge = vec![format!("metrics.`{}`", "k".repeat(MAX_SEARCH_TEXT_BYTES))];
    assert!(parse_run_order(&huge)
        .unwrap_err()
        .message
        .contains("bytes in all"));
}

#[test]
fn run_order_errors() {
    #[rustfmt::skip]
    let cases: &[(&str, &str)] = &[
        ("metrics.acc up", "Invalid ordering key in order_by clause 'metrics.acc up': expected ASC or DESC at column 13, found 'up'"),
        ("metrics.acc 'DESC'", "Invalid ordering key in order_by clause"),
        ("metrics.acc asc desc", "Invalid order_by clause 'metrics.acc asc desc'. Could not be parsed: unexpected 'desc' at column 17"),
        ("", "Invalid order_by clause ''. Could not be parsed: it is empty"),
        ("   ", "Could not be parsed: it is empty"),
        ("foo", "Invalid attribute key 'foo' specified. Valid keys are ["),
        ("`Run name`", "Invalid attribute key 'Run name'"),
        ("'start_time'", "expected an identifier such as metrics.acc, params.lr or tags.team at column 1, found ''start_time''"),
        ("metrics.'acc", "unterminated quoted string"),
        ("metrics.`acc", "unterminated quoted name"),
        ("datasets.name", "searching runs by dataset is not supported"),
        ("Tags.x", "Invalid entity type 'Tags'"),
        ("metrics.acc > 1", "Invalid ordering key in order_by clause 'metrics.acc > 1'"),
    ];
    check_errors("run order", cases, |s| {
        parse_run_order(&[s.to_string()]).map(drop)
    });
    let dup = |clauses: &[&str]| {
        let clauses: Vec<String> = clauses.iter().map(|s| s.to_string()).collect();
        parse_run_order(&clauses).unwrap_err().message
    };
    assert_eq!(
        dup(&["metrics.a", "metric.a DESC"]),
        "`order_by` contains duplicate fields: ['metrics.a', 'metric.a DESC']"
    );
    assert!(dup(&["start_time", "created DESC"]).contains("duplicate fields"));
    // The same key under different entities is not a duplicate.
    let distinct = ["metrics.a".to_string(), "params.a".to_string()];
    assert!(parse_run_order(&distinct).is_ok());
}

#[test]
fn experiment_errors() {
    #[rustfmt::skip]
    let filters: &[(&str, &str)] = &[
        ("attributes.name = 'x'", "Invalid entity type 'attributes'. Valid entity types are ('attribute', 'tag', 'tags')"),
        ("params.a = 'x'", "Invalid entity type 'params'"),
        ("name IS NULL", "IS NULL / IS NOT NULL is only supported for tags, not for attribute 'name'"),
        ("creation_time > 1.5", "Invalid value for numeric attribute 'creation_time': '1.5'"),
        ("creation_time > '1'", "Expected numeric value type for numeric attribute: creation_time. Found '1'"),
        ("last_update_time LIKE '1'", "Invalid comparator 'LIKE' for numeric attribute 'last_update_time'"),
        ("experiment_id = 'abc'", "Invalid experiment ID 'abc'. Experiment ID must be a valid integer."),
        ("experiment_id IN ('1', 'x')", "Invalid experiment ID 'x'"),
        ("experiment_id = 1", "Expected a quoted string value for attribute 'experiment_id'"),
        ("experiment_id LIKE '1%'", "Invalid comparator 'LIKE' for attribute 'experiment_id' in clause 'experiment_id LIKE '1%''; valid comparators are ['=', '!=', 'IN', 'NOT IN']"),
        ("name IN ('a')", "Only ['experiment_id'] attributes support comparison with a list of quoted string values."),
        ("name > 'a'", "Invalid comparator '>' for string attribute 'name'"),
        ("lifecycle_stage = 'active'", "Invalid attribute key 'lifecycle_stage' specified. Valid keys are ['creation_time', 'experiment_id', 'last_update_time', 'name']"),
        ("tags.a > 'x'", "Invalid comparator '>' for tag 'a'"),
        ("name = 'a' OR name = 'b'", "'OR' at column 12"),
        ("name = 'a", "unterminated quoted string starting at column 8"),
    ];
    check_errors("experiment filter", filters, |s| {
        parse_experiment_filter(s).map(drop)
    });
    #[rustfmt::skip]
    let orders: &[(&str, &str)] = &[
        ("tags.team", "Invalid order_by entity: tag (in 'tags.team'); experiments can be ordered by ['creation_time', 'experiment_id', 'last_update_time', 'name']"),
        ("foo DESC", "Invalid attribute key 'foo' specified."),
        ("attributes.name", "Invalid entity type 'attributes'"),
        ("name sideways", "Invalid ordering key in order_by clause 'name sideways'"),
        ("", "it is empty"),
    ];
    check_errors("experiment order", orders, |s| {
        parse_experiment_order(&[s.to_string()]).map(drop)
    });
}

// ---------------------------------------------------------------------------
// Fuzzing
// ---------------------------------------------------------------------------

/// Runs and experiments for fuzzed filters and orders to look at, an empty one included.
fn fuzz_runs() -> Vec<RunRecord> {
    let mut rs = runs();
    rs.push(RunRecord::default());
    rs
}

fn fuzz_experiments() -> Vec<ExperimentRecord> {
    let mut es = experiments();
    es.push(ExperimentRecord {
        experiment_id: "not a number".into(),
        ..ExperimentRecord::default()
    });
    es
}

/// Feeds `text` to all four parsers, as a filter, one `order_by` clause, and clauses
/// split at commas, and uses whatever parses. Panics are the failure.
fn exercise(text: &str) {
    let check = |r: Result<(), SearchError>| {
        if let Err(e) = r {
            assert!(!e.message.is_empty());
        }
    };
    check(parse_run_filter(text).map(|f| {
        fuzz_runs().iter().for_each(|r| {
            f.matches(r);
        })
    }));
    check(parse_experiment_filter(text).map(|f| {
        fuzz_experiments().iter().for_each(|e| {
            f.matches(e);
        })
    }));
    let split: Vec<String> = text.split(',').map(str::to_string).collect();
    for clauses in [vec![text.to_string()], split] {
        check(parse_run_order(&clauses).map(|o| {
            fuzz_runs().sort_by(|a, b| o.compare(a, b));
        }));
        check(parse_experiment_order(&clauses).map(|o| {
            fuzz_experiments().sort_by(|a, b| o.compare(a, b));
        }));
    }
}

const SEEDS: &[&str] = &[
    "metrics.acc > 0.9 AND params.lr = '0.01'",
    "tags.\"mlflow.runName\" LIKE 'alpha%' and metrics.`val loss` <= -1.5e-3",
    "run_id IN ('r1', \"r2\",) AND status != 'RUNNING'",
    "params.lr IS NOT NULL AND tags.team ILIKE 'v_s%'",
    "attributes.start_time >= 1000 AND end_time < 5000.5",
    "tags.note = 'it''s' AND run_id NOT IN ('r3')",
    "name LIKE 'vision/%' AND tags.priority IS NULL",
    "experiment_id IN ('1', '2') and creation_time > 100",
    "metrics.acc DESC",
    "tags.`my tag` asc",
    "created DESC",
    "experiment_id",
];

const PIECES: &[&str] = &[
    "'", "\"", "`", ".", "(", ")", ",", " ", "=", "!=", "<", ">=", "%", "_", "\\", "-", "e", "1",
    "AND", "and", "OR", "IN", "NOT", "IS", "NULL", "LIKE", "ASC", "metrics.", "tags.", "é",
    "\u{3000}", "\n", ";", "''", "\\'", "1e+", ".5",
];

#[derive(Debug, Clone)]
enum Mutation {
    Delete(usize, usize),
    Insert(usize, usize),
    Replace(usize, usize),
    Truncate(usize),
    Duplicate(usize, usize),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (any::<usize>(), 1..4usize).prop_map(|(at, n)| Mutation::Delete(at, n)),
        (any::<usize>(), any::<usize>()).prop_map(|(at, p)| Mutation::Insert(at, p)),
        (any::<usize>(), any::<usize>()).prop_map(|(at, p)| Mutation::Replace(at, p)),
        any::<usize>().prop_map(Mutation::Truncate),
        (any::<usize>(), 1..12usize).prop_map(|(at, n)| Mutation::Duplicate(at, n)),
    ]
}

fn mutate(seed: &str, mutations: &[Mutation]) -> String {
    let mut chars: Vec<char> = seed.chars().collect();
    for m in mutations {
        let at = |i: usize, len: usize| i % (len + 1);
        match *m {
            Mutation::Delete(i, n) => {
                let a = at(i, chars.len());
                let b = (a + n).min(chars.len());
                chars.drain(a..b);
            }
            Mutation::Insert(i, p) => {
                let a = at(i, chars.len());
                chars.splice(a..a, PIECES[p % PIECES.len()].chars());
            }
            Mutation::Replace(i, p) => {
                let a = at(i, chars.len());
                let b = (a + 1).min(chars.len());
                chars.splice(a..b, PIECES[p % PIECES.len()].chars());
            }
            Mutation::Truncate(i) => chars.truncate(at(i, chars.len())),
            Mutation::Duplicate(i, n) => {
                let a = at(i, chars.len());
                let b = (a + n).min(chars.len());
                let copy: Vec<char> = chars[a..b].to_vec();
                chars.splice(b..b, copy);
            }
        }
    }
    chars.into_iter().collect()
}

/// Reference LIKE: plain recursion, exponential but obviously right on short inputs.
fn like_reference(t: &[char], p: &[char], fold: bool) -> bool {
    match p.split_first() {
        None => t.is_empty(),
        Some(('%', rest)) => (0..=t.len()).any(|i| like_reference(&t[i..], rest, fold)),
        Some((&pc, rest)) => match t.split_first() {
            Some((&tc, t_rest)) => {
                (pc == '_' || pc == tc || (fold && pc.to_lowercase().eq(tc.to_lowercase())))
                    && like_reference(t_rest, rest, fold)
            }
            None => false,
        },
    }
}

fn quoted_value() -> impl Strategy<Value = String> {
    ("[a-zA-Z0-9%_. -]{0,6}", any::<bool>()).prop_map(|(v, single)| {
        if single {
            format!("'{v}'")
        } else {
            format!("\"{v}\"")
        }
    })
}

fn number_text() -> impl Strategy<Value = String> {
    prop_oneof![
        (-3000i64..6000).prop_map(|i| i.to_string()),
        (-10.0f64..10.0).prop_map(|f| format!("{f}")),
        (-10.0f64..10.0).prop_map(|f| format!("{f:e}")),
    ]
}

/// One valid run clause, written in any of the accepted spellings.
fn run_clause() -> impl Strategy<Value = String> {
    let numeric_ops = prop::sample::select(vec!["=", "!=", "<", "<=", ">", ">="]);
    let string_ops = prop::sample::select(vec!["=", "!=", "LIKE", "ILIKE", "like", "Ilike"]);
    let metric = (
        prop::sample::select(vec![
            "metrics.acc",
            "metric.loss",
            "metrics.`val loss`",
            "metrics.\"val loss\"",
            "metrics.steps",
            "metrics.none",
        ]),
        numeric_ops.clone(),
        number_text(),
    )
        .prop_map(|(k, op, n)| format!("{k} {op} {n}"));
    let keyed = [
        "params.lr",
        "param.opt",
        "tags.team",
        "tag.`my tag`",
        "tags.mlflow.runName",
        "parameters.none",
    ];
    let text = (
        prop::sample::select(
            keyed
                .iter()
                .copied()
                .chain([
                    "status",
                    "attributes.run_name",
                    "run.user_id",
                    "attr.artifact_uri",
                    "lifecycle_stage",
                    "run_id",
                ])
                .collect::<Vec<_>>(),
        ),
        string_ops,
        quoted_value(),
    )
        .prop_map(|(k, op, v)| format!("{k} {op} {v}"));
    let null = (
        prop::sample::select(keyed.to_vec()),
        prop::sample::select(vec!["IS NULL", "is not null", "IS  NOT\tNULL"]),
    )
        .prop_map(|(k, op)| format!("{k} {op}"));
    let time = (
        prop::sample::select(vec![
            "start_time",
            "end_time",
            "created",
            "attributes.start_time",
        ]),
        numeric_ops,
        number_text(),
    )
        .prop_map(|(k, op, n)| format!("{k} {op} {n}"));
    let list = (
        prop::sample::select(vec!["IN", "NOT IN", "not in"]),
        prop::collection::vec(
            prop::sample::select(vec!["r1", "r2", "r3", "r4", "zz"]),
            1..4,
        ),
    )
        .prop_map(|(op, ids)| {
            let items: Vec<String> = ids.iter().map(|i| format!("'{i}'")).collect();
            format!("run_id {op} ({})", items.join(", "))
        });
    prop_oneof![metric, text, null, time, list]
}

fn arb_run() -> impl Strategy<Value = RunRecord> {
    let metric = prop::option::of(prop::sample::select(vec![
        f64::NAN,
        -0.0,
        0.0,
        0.5,
        1.0,
        f64::INFINITY,
    ]));
    (
        prop::sample::select(vec!["a", "b", "c", "d"]),
        metric,
        prop::option::of(prop::sample::select(vec!["0.1", "0.01", "x"])),
        prop::option::of(0..3i64),
        prop::option::of(0..3i64),
        prop::option::of(prop::sample::select(vec!["p", "q"])),
    )
        .prop_map(|(id, acc, lr, start, end, name)| RunRecord {
            run_id: id.into(),
            run_name: name.map(str::to_string),
            start_time: start,
            end_time: end,
            params: lr.map(|v| strings(&[("lr", v)])).unwrap_or_default(),
            tags: lr.map(|v| strings(&[("t", v)])).unwrap_or_default(),
            metrics: acc.map(|v| numbers(&[("acc", v)])).unwrap_or_default(),
            ..RunRecord::default()
        })
}

fn arb_experiment() -> impl Strategy<Value = ExperimentRecord> {
    (
        prop::sample::select(vec!["0", "1", "2", "10", "07", "7", "x", ""]),
        prop::sample::select(vec!["a", "B", "b"]),
        0..3i64,
        0..3i64,
    )
        .prop_map(|(id, name, created, updated)| ExperimentRecord {
            experiment_id: id.into(),
            name: name.into(),
            creation_time: created,
            last_update_time: updated,
            ..ExperimentRecord::default()
        })
}

/// `compare` is antisymmetric and agrees with the order a sort produced.
fn assert_total<T>(items: &[T], cmp: impl Fn(&T, &T) -> Ordering) -> Result<(), TestCaseError> {
    for (i, a) in items.iter().enumerate() {
        for (j, b) in items.iter().enumerate() {
            let ab = cmp(a, b);
            prop_assert_eq!(ab, cmp(b, a).reverse());
            if i < j {
                prop_assert_ne!(ab, Ordering::Greater);
            }
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1000))]

    #[test]
    fn arbitrary_text_never_panics(text in ".{0,80}") {
        exercise(&text);
    }

    #[test]
    fn syntax_soup_never_panics(
        parts in prop::collection::vec(prop::sample::select(PIECES.to_vec()), 0..16),
        words in prop::collection::vec("[a-zA-Z_]{0,6}", 0..4),
    ) {
        let mut text = parts.concat();
        for w in &words {
            text.push_str(w);
            text.push_str(parts.first().copied().unwrap_or(" "));
        }
        exercise(&text);
    }

    #[test]
    fn mutated_valid_text_never_panics(
        seed in 0..SEEDS.len(),
        mutations in prop::collection::vec(mutation(), 1..4),
    ) {
        exercise(&mutate(SEEDS[seed], &mutations));
    }

    #[test]
    fn and_is_conjunction(
        clauses in prop::collection::vec(run_clause(), 1..5),
        joiner in prop::sample::select(vec![" AND ", " and ", "\tAnD\n", "  AND  "]),
    ) {
        let joined = clauses.join(joiner);
        let all = parse_run_filter(&joined);
        prop_assert!(all.is_ok(), "{:?}: {:?}", joined, all.err());
        let all = all.unwrap();
        let singles: Vec<RunFilter> =
            clauses.iter().map(|c| parse_run_filter(c).unwrap()).collect();
        for run in fuzz_runs() {
            prop_assert_eq!(all.matches(&run), singles.iter().all(|f| f.matches(&run)));
        }
    }

    #[test]
    fn like_agrees_with_reference(
        text in "[abAB_%]{0,8}",
        pattern in "[abAB_%]{0,6}",
        fold in any::<bool>(),
    ) {
        let t: Vec<char> = text.chars().collect();
        let p: Vec<char> = pattern.chars().collect();
        prop_assert_eq!(like(&text, &pattern, fold), like_reference(&t, &p, fold));
    }

    #[test]
    fn run_order_is_total(
        runs in prop::collection::vec(arb_run(), 0..10),
        keys in prop::collection::vec(
            (
                prop::sample::select(vec![
                    "metrics.acc", "params.lr", "tags.t", "start_time", "end_time",
                    "run_name", "run_id",
                ]),
                prop::sample::select(vec!["", " ASC", " DESC"]),
            ),
            0..4,
        ),
    ) {
        let clauses: Vec<String> = keys.iter().map(|(k, d)| format!("{k}{d}")).collect();
        // Random keys may repeat, which is an error; the rest must order totally.
        if let Ok(order) = parse_run_order(&clauses) {
            let mut sorted = runs;
            sorted.sort_by(|a, b| order.compare(a, b));
            assert_total(&sorted, |a, b| order.compare(a, b))?;
        }
    }

    #[test]
    fn experiment_order_is_total(
        experiments in prop::collection::vec(arb_experiment(), 0..10),
        keys in prop::collection::vec(
            (
                prop::sample::select(vec![
                    "name", "experiment_id", "creation_time", "last_update_time",
                ]),
                prop::sample::select(vec!["", " ASC", " DESC"]),
            ),
            0..3,
        ),
    ) {
        let clauses: Vec<String> = keys.iter().map(|(k, d)| format!("{k}{d}")).collect();
        let order = parse_experiment_order(&clauses).unwrap();
        let mut sorted = experiments;
        sorted.sort_by(|a, b| order.compare(a, b));
        assert_total(&sorted, |a, b| order.compare(a, b))?;
    }
}
