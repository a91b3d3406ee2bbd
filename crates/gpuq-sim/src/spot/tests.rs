use super::*;

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/spot")
}

/// The fixture's 300 rows hold two windows of 140 ticks (7.6 h).
fn small() -> SpotSetting {
    let deadline_h = 140.0 * 195.0 / 3600.0;
    SpotSetting {
        work_h: deadline_h / 1.5,
        deadline_h,
        windows: vec![0, 1],
        ..SpotSetting::skynomad_v100()
    }
}

#[test]
fn every_policy_meets_the_deadline_on_the_fixture_and_none_beats_the_optimum() {
    let r = evaluate_with(&fixture(), &small()).unwrap();
    assert_eq!(r.data.rows, 300);
    assert_eq!(r.data.median_step_s, 195);
    assert_eq!(r.rows.len(), 3 + 3 + 3 + 4);
    for row in &r.rows {
        assert_eq!(row.misses, 0, "{} on {}", row.policy, row.regions);
        assert_eq!(row.costs.len(), 2);
        assert!(row
            .outcomes
            .iter()
            .all(|o| o.met_deadline && o.finished_at_h.unwrap() <= small().deadline_h + 1e-9));
        assert!(
            row.published.is_none(),
            "the fixture has no published results"
        );
        let opt = r
            .rows
            .iter()
            .find(|o| o.policy == "offline_optimum" && o.regions == row.regions)
            .unwrap();
        for (c, o) in row.costs.iter().zip(&opt.costs) {
            assert!(
                c >= &(o - 1e-6),
                "{} on {}: {c} below the optimum {o}",
                row.policy,
                row.regions
            );
        }
        if row.policy == "uniform_progress" {
            assert_eq!(row.forced, 0, "Uniform Progress is safe by its own rules");
        }
    }
    // On all three zones the optimum is no dearer than on any one.
    let all = r
        .rows
        .iter()
        .find(|o| o.policy == "offline_optimum" && o.regions.contains('+'))
        .unwrap();
    for one in r
        .rows
        .iter()
        .filter(|o| o.policy == "offline_optimum" && !o.regions.contains('+'))
    {
        assert!(all.mean <= one.mean + 1e-9);
    }
    let text = r.to_string();
    assert!(
        text.contains("| slack_aware | us-east-1c+us-east-2b+us-west-2a |"),
        "{text}"
    );
    assert!(text.contains("Check: optimum on us-east-1c+us-east-2b+us-west-2a: every plan replays"));
    let json = serde_json::to_value(&r).unwrap();
    assert_eq!(json["rows"].as_array().unwrap().len(), 13);
}

#[test]
fn the_published_setting_does_not_fit_in_the_fixture() {
    let e = evaluate(&fixture()).unwrap_err();
    assert!(
        matches!(
            e,
            SpotError::Window {
                window: 3,
                start: 3318,
                need: 1106,
                have: 300
            }
        ),
        "{e}"
    );
}

#[test]
fn the_published_setting_is_skynomads() {
    let s = SpotSetting::skynomad_v100();
    assert_eq!(s.window_ticks(), 1106);
    assert!((s.deadline_h - 59.908_333).abs() < 1e-5);
    assert!((s.work_h - 39.938_888).abs() < 1e-5);
    let starts: Vec<f64> = s.windows.iter().map(|&w| w as f64 * s.deadline_h).collect();
    for (a, b) in starts
        .iter()
        .zip([179.725, 299.541_666, 419.358_333, 479.266_666, 838.716_666])
    {
        assert!((a - b).abs() < 1e-5, "{a} vs {b}");
    }
}

#[test]
fn dates_and_transfer_prices() {
    assert_eq!(parse_datetime("1970-01-01 00:00:00"), Some(0));
    assert_eq!(parse_datetime("2023-02-15 22:08:16"), Some(1_676_498_896));
    assert_eq!(parse_datetime("2023-02-15T22:08:16"), Some(1_676_498_896));
    assert_eq!(parse_datetime("2024-02-29 12:00"), Some(1_709_208_000));
    assert_eq!(parse_datetime("2023-13-01 00:00:00"), None);
    assert_eq!(parse_datetime("yesterday"), None);
    assert_eq!(transfer_usd_per_gb("us-east-1c", "us-east-1d"), 0.0);
    assert_eq!(transfer_usd_per_gb("us-east-1c", "us-east-2b"), 0.01);
    assert_eq!(transfer_usd_per_gb("us-east-2b", "us-east-1c"), 0.01);
    assert_eq!(transfer_usd_per_gb("us-east-2b", "us-west-2a"), 0.02);
    assert_eq!(transfer_usd_per_gb("us-west-2a", "us-east-1c"), 0.02);
}

#[test]
fn published_results_are_read_by_window() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(PUBLISHED_FILE);
    let header = "scenario_name,regions_in_scenario,num_regions,strategy,trace_index,task_type,trace_mode,region,strategy_file,task_duration,checkpoint_size,restart_overhead,deadline_ratio,deadline_hours,env_start_hours,use_full_trace,enforce_window_bound,data_paths,window_index,cost,migrations";
    let rows = [
        r#"V100 (3 regions),"['us-east-1c_v100_1', 'us-east-2b_v100_1']",3,unified_cost_model_rate_ratio,0,multi_region,,,,39.9,50.0,0.2,1.5,59.90833333333333,179.725,True,True,['data/x'],0,42.99431666666663,4"#,
        r#"V100 (3 regions),"['us-east-1c_v100_1', 'us-east-2b_v100_1']",3,rc_cr_threshold,0,multi_region,,us-east-2b_v100_1,,39.9,50.0,0.2,1.5,59.90833333333333,299.5416666666667,True,True,['data/x'],1,47.05642,0"#,
        r#"V100 (3 regions),"['us-east-1c_v100_1', 'us-east-2b_v100_1']",3,rc_cr_threshold,0,multi_region,best_single,us-east-1c_v100_1,,39.9,50.0,0.2,1.5,59.90833333333333,179.725,True,True,['data/x'],0,50.16908,0"#,
    ];
    std::fs::write(&path, format!("{header}\n{}\n", rows.join("\n"))).unwrap();
    let p = load_published(&path, &SpotSetting::skynomad_v100()).unwrap();
    assert_eq!(
        p.get("unified_cost_model_rate_ratio", "").unwrap()[&3],
        42.99431666666663
    );
    assert_eq!(
        p.get("rc_cr_threshold", "us-east-2b").unwrap()[&5],
        47.05642
    );
    assert!(
        p.get("rc_cr_threshold", "us-east-1c").is_none(),
        "summary rows are skipped"
    );
    assert_eq!(split_csv(r#"a,"b,""c""",d"#), vec!["a", "b,\"c\"", "d"]);
}

#[test]
fn bad_data_is_an_error_naming_the_file() {
    let zones = vec!["us-east-1c".to_string(), "us-east-2b".to_string()];
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let prices = r#"{"us-east-1c_v100_1": [1.0, 1.0], "us-east-2b_v100_1": [0.9]}"#;
    std::fs::write(d.join("v100_spot_prices.json"), prices).unwrap();
    std::fs::write(
        d.join("us-east-1c_v100_1.csv"),
        "date,availability\n2023-02-15 22:08:16,1\n2023-02-15 22:11:31,0\n",
    )
    .unwrap();
    let e = load(d, &zones).unwrap_err();
    assert!(
        e.to_string()
            .contains("expected one us-east-2b_*.csv, found 0"),
        "{e}"
    );
    std::fs::write(
        d.join("us-east-2b_v100_1.csv"),
        "date,availability\n2023-02-15 22:08:16,1\n2023-02-15 22:11:31,1\n",
    )
    .unwrap();
    let e = load(d, &zones).unwrap_err();
    assert!(
        e.to_string().contains("1 prices for 2 availability rows"),
        "{e}"
    );
    std::fs::write(
        d.join("v100_spot_prices.json"),
        prices.replace("[0.9]", "[0.9, 0.9]"),
    )
    .unwrap();
    let t = load(d, &zones).unwrap();
    assert_eq!(
        (t.available[0].clone(), t.prices[1].clone()),
        (vec![true, false], vec![0.9, 0.9])
    );
    std::fs::write(
        d.join("us-east-2b_v100_1.csv"),
        "date,availability\n2023-02-15 22:08:16,1\n2023-02-15 22:11:32,1\n",
    )
    .unwrap();
    let e = load(d, &zones).unwrap_err();
    assert!(e.to_string().contains("timestamps differ"), "{e}");
    std::fs::write(
        d.join("us-east-2b_v100_1.csv"),
        "date,availability\n2023-02-15 22:08:16,2\n",
    )
    .unwrap();
    let e = load(d, &zones).unwrap_err();
    assert!(
        e.to_string()
            .contains("us-east-2b_v100_1.csv: line 2: availability is not 0 or 1"),
        "{e}"
    );
    std::fs::write(d.join("us-east-2b_v100_1.csv"), "when,up\n").unwrap();
    assert!(load(d, &zones)
        .unwrap_err()
        .to_string()
        .contains("expected date,availability"));
}
