use super::*;

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/spot")
}

/// The fixture (the old layout), converted into the format in a temp dir.
fn converted() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let c = convert(&fixture(), dir.path(), 3.06, None).unwrap();
    assert_eq!(c.zones, ["us-east-1c", "us-east-2b", "us-west-2a"]);
    assert_eq!((c.rows, c.tick_s), (300, 203.0));
    dir
}

/// Two windows of 140 ticks on the fixture's 300 rows.
fn small(tick_s: f64) -> SpotSetting {
    let deadline_h = 140.0 * tick_s / 3600.0;
    SpotSetting {
        zones: Vec::new(),
        work_h: deadline_h / 1.5,
        deadline_h,
        restart_h: 0.2,
        checkpoint_gb: 50.0,
        transfer_per_gb: 0.02,
        windows: Windows::Count(2),
        published: None,
    }
}

#[test]
fn every_policy_meets_the_deadline_on_the_fixture_and_none_beats_the_optimum() {
    let dir = converted();
    let r = evaluate(dir.path(), &small(203.0)).unwrap();
    assert_eq!(r.data.rows, 300);
    assert_eq!(r.data.tick_s, 203.0);
    assert_eq!(r.window_ticks, 140);
    assert_eq!(
        r.windows.iter().map(|w| w.start_tick).collect::<Vec<_>>(),
        [0, 160]
    );
    // UP and ours per zone, ours and greedy on all, on-demand, 4 optima.
    assert_eq!(r.rows.len(), 3 * 2 + 2 + 1 + 4);
    for row in &r.rows {
        assert_eq!(row.misses, 0, "{} on {}", row.policy, row.regions);
        assert!(row.ratios.iter().all(|x| *x >= 1.0 - 1e-9));
        if row.policy == "uniform_progress" {
            assert_eq!(row.forced, 0, "Uniform Progress is safe by its own rules");
        }
    }
    assert!(r.over_bound.is_empty(), "{r}");
    let text = r.to_string();
    assert!(
        text.contains("| slack_aware | us-east-1c+us-east-2b+us-west-2a |"),
        "{text}"
    );
    assert!(text.contains("| window | start h | optimum |"), "{text}");
    let json = serde_json::to_value(&r).unwrap();
    assert_eq!(json["windows"].as_array().unwrap().len(), 2);
    assert_eq!(json["setting"]["windows"], serde_json::json!({"count": 2}));
    // A subset of zones, in the order given; starts given in hours.
    let s = SpotSetting {
        zones: vec!["us-west-2a".into(), "us-east-1c".into()],
        windows: Windows::StartsH(vec![0.0, 160.0 * 203.0 / 3600.0]),
        ..small(203.0)
    };
    let r2 = evaluate(dir.path(), &s).unwrap();
    assert_eq!(r2.data.zones, ["us-west-2a", "us-east-1c"]);
    assert_eq!(r2.windows[1].start_tick, 160);
}

#[test]
fn windows_that_do_not_fit_are_an_error() {
    let dir = converted();
    let s = SpotSetting {
        windows: Windows::StartsH(vec![10.0]),
        ..small(203.0)
    };
    let e = evaluate(dir.path(), &s).unwrap_err();
    assert!(
        e.to_string().contains("needs 140 ticks, the data has 300"),
        "{e}"
    );
    let s = SpotSetting {
        deadline_h: 400.0 * 203.0 / 3600.0,
        ..small(203.0)
    };
    assert!(matches!(
        evaluate(dir.path(), &s).unwrap_err(),
        SpotError::Window { need: 400, .. }
    ));
}

#[test]
fn times_parse_as_iso_8601_or_epoch_seconds() {
    assert_eq!(format::parse_time("0"), Some(0));
    assert_eq!(format::parse_time("1676498896"), Some(1_676_498_896_000));
    assert_eq!(format::parse_time("1676498896.5"), Some(1_676_498_896_500));
    assert_eq!(
        format::parse_time("2023-02-15T22:08:16Z"),
        Some(1_676_498_896_000)
    );
    assert_eq!(
        format::parse_time("2023-02-15 22:08:16"),
        Some(1_676_498_896_000)
    );
    assert_eq!(
        format::parse_time("2023-02-16T00:08:16+02:00"),
        Some(1_676_498_896_000)
    );
    assert_eq!(
        format::parse_time("2023-02-15T17:08:16-05:00"),
        Some(1_676_498_896_000)
    );
    assert_eq!(
        format::parse_time("2023-02-15T22:08Z"),
        Some(1_676_498_880_000)
    );
    assert_eq!(format::parse_time("2023-13-01T00:00:00Z"), None);
    assert_eq!(format::parse_time("yesterday"), None);
    assert_eq!(parse_datetime("2023-02-15 22:08:16"), Some(1_676_498_896));
}

fn write_dir(zones: &str, files: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("zones.csv"), zones).unwrap();
    for (name, text) in files {
        std::fs::write(dir.path().join(name), text).unwrap();
    }
    dir
}

fn load_err(zones: &str, files: &[(&str, &str)]) -> String {
    let dir = write_dir(zones, files);
    let e = load(dir.path(), None).unwrap_err().to_string();
    assert!(!e.contains(&*dir.path().to_string_lossy()) || e.contains(".csv"));
    e
}

const A: &str = "time,available,spot_per_hour\n0,1,0.9\n600,0,0.9\n1200,1,1.0\n";

#[test]
fn the_format_reads_and_its_bad_inputs_are_clear_errors() {
    let zones = "zone,on_demand_per_hour\na,3.0\nb,2.5\n";
    let dir = write_dir(zones, &[("a.csv", A), ("b.csv", A)]);
    let t = load(dir.path(), None).unwrap();
    assert_eq!(t.tick_s, 600.0);
    assert_eq!(t.on_demand_per_h, [3.0, 2.5]);
    assert_eq!(t.available[0], [true, false, true]);
    assert_eq!(t.prices[1], [0.9, 0.9, 1.0]);
    // ISO times infer the same tick.
    let iso = "time,available,spot_per_hour\n2024-01-01T00:00:00Z,1,1\n2024-01-01T01:00:00Z,1,1\n";
    let dir = write_dir("zone,on_demand_per_hour\nz,4\n", &[("z.csv", iso)]);
    assert_eq!(load(dir.path(), None).unwrap().tick_s, 3600.0);

    type Files = Vec<(&'static str, String)>;
    let cases: Vec<(&str, Files, &str)> = vec![
        // A gap.
        (
            zones,
            vec![
                ("a.csv", A.into()),
                ("b.csv", "time,available,spot_per_hour\n0,1,1\n600,1,1\n1800,1,1\n".into()),
            ],
            "b.csv: line 4, field time: a gap: 1200 s after line 3, the tick is 600 s (inferred from the first two rows), so 1 ticks are missing",
        ),
        // A duplicate time.
        (
            zones,
            vec![
                ("a.csv", A.into()),
                ("b.csv", "time,available,spot_per_hour\n0,1,1\n600,1,1\n600,1,1\n".into()),
            ],
            "b.csv: line 4, field time: 600 again (line 3 has it): a duplicate time",
        ),
        // Misaligned ticks within a file.
        (
            zones,
            vec![
                ("a.csv", A.into()),
                ("b.csv", "time,available,spot_per_hour\n0,1,1\n600,1,1\n1000,1,1\n".into()),
            ],
            "b.csv: line 4, field time: misaligned tick: 400 s after line 3",
        ),
        // Misaligned ticks across zones.
        (
            zones,
            vec![
                ("a.csv", A.into()),
                ("b.csv", "time,available,spot_per_hour\n300,1,1\n900,1,1\n1500,1,1\n".into()),
            ],
            "b.csv: misaligned ticks: its rows run from 300 s for 3 ticks",
        ),
        (
            zones,
            vec![
                ("a.csv", A.into()),
                ("b.csv", "time,available,spot_per_hour\n0,1,1\n300,1,1\n600,1,1\n".into()),
            ],
            "b.csv: misaligned ticks: its tick is 300 s",
        ),
        // A zone listed without its file.
        (
            zones,
            vec![("a.csv", A.into())],
            "zones.csv: zone \"b\" is listed but",
        ),
        // A zone file without a price row.
        (
            "zone,on_demand_per_hour\na,3.0\n",
            vec![("a.csv", A.into()), ("c.csv", A.into())],
            "c.csv: a zone file with no row in",
        ),
        // A zone listed without an on-demand price.
        (
            "zone,on_demand_per_hour\na,\n",
            vec![("a.csv", A.into())],
            "zones.csv: line 2, field on_demand_per_hour: \"\" is not a price",
        ),
        // A row without a spot price.
        (
            "zone,on_demand_per_hour\na,3\n",
            vec![("a.csv", "time,available,spot_per_hour\n0,1,1\n600,1,\n".into())],
            "a.csv: line 3, field spot_per_hour: missing",
        ),
        (
            "zone,on_demand_per_hour\na,3\n",
            vec![("a.csv", "time,available,spot_per_hour\n0,1,1\n600,yes,1\n".into())],
            "a.csv: line 3, field available: \"yes\", expected 1",
        ),
        (
            "zone,on_demand_per_hour\na,3\n",
            vec![("a.csv", "time,available,spot_per_hour\nnoon,1,1\n".into())],
            "a.csv: line 2, field time: \"noon\" is neither ISO 8601",
        ),
        (
            "zone,on_demand_per_hour\na,3\n",
            vec![("a.csv", "time,available,spot_per_hour\n0,1,1\n".into())],
            "a.csv: 1 row(s): at least two are needed to infer the tick",
        ),
        (
            "zone,price\na,3\n",
            vec![("a.csv", A.into())],
            "zones.csv: line 1: header \"zone,price\", expected zone,on_demand_per_hour",
        ),
        (
            "zone,on_demand_per_hour\na,3\na,4\n",
            vec![("a.csv", A.into())],
            "zones.csv: line 3, field zone: \"a\" is listed twice",
        ),
    ];
    for (zones, files, want) in cases {
        let files: Vec<(&str, &str)> = files.iter().map(|(n, t)| (*n, t.as_str())).collect();
        let e = load_err(zones, &files);
        assert!(e.contains(want), "{e}\n  wanted: {want}");
    }
    let dir = write_dir(zones, &[("a.csv", A), ("b.csv", A)]);
    let e = load(dir.path(), Some(&["c".to_string()])).unwrap_err();
    assert!(
        e.to_string()
            .contains("no zone \"c\" (--zones); it lists a, b"),
        "{e}"
    );
}

#[test]
fn the_converter_keeps_the_rows_and_refuses_a_bad_source() {
    let dir = converted();
    let t = load(dir.path(), None).unwrap();
    let old = load_legacy(&fixture(), &t.zones).unwrap();
    assert_eq!(t.available, old.available);
    assert_eq!(t.prices, old.prices);
    assert_eq!(t.on_demand_per_h, [3.06; 3]);
    assert_eq!(t.start_ms, old.times[0] * 1000);
    let out = tempfile::tempdir().unwrap();
    let c = convert(&fixture(), out.path(), 3.06, Some(195.0)).unwrap();
    assert_eq!(c.tick_s, 195.0);
    assert_eq!(c.source_steps_s.1, 195, "median step of the source rows");
    let empty = tempfile::tempdir().unwrap();
    let e = convert(empty.path(), out.path(), 3.06, None).unwrap_err();
    assert!(e.to_string().contains("no <zone>_<device>.csv"), "{e}");
}

#[test]
fn published_results_are_read_by_window_start() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("published.csv");
    let header = "scenario_name,regions_in_scenario,num_regions,strategy,trace_index,task_type,trace_mode,region,strategy_file,task_duration,checkpoint_size,restart_overhead,deadline_ratio,deadline_hours,env_start_hours,use_full_trace,enforce_window_bound,data_paths,window_index,cost,migrations";
    let rows = [
        r#"V100 (3 regions),"['us-east-1c_v100_1', 'us-east-2b_v100_1']",3,unified_cost_model_rate_ratio,0,multi_region,,,,39.9,50.0,0.2,1.5,59.90833333333333,179.725,True,True,['data/x'],0,42.99431666666663,4"#,
        r#"V100 (3 regions),"['us-east-1c_v100_1', 'us-east-2b_v100_1']",3,rc_cr_threshold,0,multi_region,,us-east-2b_v100_1,,39.9,50.0,0.2,1.5,59.90833333333333,299.5416666666667,True,True,['data/x'],1,47.05642,0"#,
        r#"V100 (3 regions),"['us-east-1c_v100_1', 'us-east-2b_v100_1']",3,rc_cr_threshold,0,multi_region,best_single,us-east-1c_v100_1,,39.9,50.0,0.2,1.5,59.90833333333333,179.725,True,True,['data/x'],0,50.16908,0"#,
    ];
    std::fs::write(&path, format!("{header}\n{}\n", rows.join("\n"))).unwrap();
    let p = load_published(&path, &[179.725, 299.541_666], 195.0 / 3600.0).unwrap();
    assert_eq!(
        p.get("unified_cost_model_rate_ratio", "").unwrap()[&0],
        42.99431666666663
    );
    assert_eq!(
        p.get("rc_cr_threshold", "us-east-2b").unwrap()[&1],
        47.05642
    );
    assert!(
        p.get("rc_cr_threshold", "us-east-1c").is_none(),
        "summary rows are skipped"
    );
    assert_eq!(split_csv(r#"a,"b,""c""",d"#), vec!["a", "b,\"c\"", "d"]);
}
