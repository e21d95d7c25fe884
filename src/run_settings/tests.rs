use super::*;

struct Fixture {
    dir: tempfile::TempDir,
}

impl Fixture {
    fn new() -> Fixture {
        Fixture { dir: tempfile::tempdir().expect("tempdir") }
    }

    fn write(&self, name: &str, text: &str) -> PathBuf {
        let path = self.dir.path().join(name);
        std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        std::fs::write(&path, text).expect("write");
        path
    }

    fn sources(&self) -> Sources {
        let root = self.dir.path();
        Sources {
            user: Some(root.join("user/config.toml")),
            project: Some(root.join(PROJECT_FILE)),
            workflow: Some(root.join("flows").join(WORKFLOW_FILE)),
            workflow_hooks: Some(root.join("flows/fabro.toml")),
            run_config: Some(root.join("flows/run.toml")),
        }
    }

    fn load(&self, env: &[(&str, &str)]) -> Result<RunSettings, SettingsError> {
        let env: BTreeMap<String, String> = env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        load_with(&self.sources(), &ConfigFiles::from_disk(), &|name| env.get(name).cloned())
    }
}

#[test]
fn higher_layers_win_key_by_key_inputs_whole_labels_and_servers_by_name() {
    let fixture = Fixture::new();
    fixture.write(
        "user/config.toml",
        "default_model = \"user-model\"\nsandbox = \"bwrap\"\n\n[run.inputs]\nticket = \"U-1\"\nextra = 1\n\n\
         [run.labels]\nteam = \"user\"\nowner = \"ada\"\n\n[mcp_servers.files]\ntype = \"stdio\"\ncommand = [\"u\"]\n",
    );
    fixture.write(
        PROJECT_FILE,
        "_version = 1\n[run.model]\nname = \"project-model\"\nprovider = \"anthropic\"\n\n[run.labels]\nteam = \"payments\"\n",
    );
    fixture.write("flows/workflow.toml", "[run.agent.mcps.files]\ntype = \"stdio\"\ncommand = [\"w\"]\n");
    fixture.write(
        "flows/run.toml",
        "[workflow]\ngraph = \"flow.dot\"\n\n[run]\ngoal_file = \"goal.md\"\n\n[run.inputs]\nticket = \"R-7\"\n\n\
         [run.limits]\nmax_output = \"2MB\"\nmax_cost = 3\n",
    );
    let settings = fixture.load(&[]).expect("valid");
    let root = fixture.dir.path();
    let model = settings.model.as_ref().expect("model");
    assert_eq!(model.value, "project-model");
    assert_eq!(
        (model.origin.layer, model.origin.line, model.origin.key.as_str()),
        (Layer::Project, Some(3), "run.model.name")
    );
    assert_eq!(
        settings.sandbox.as_ref().map(|set| (set.value, set.origin.key.as_str())),
        Some((SandboxKind::Bwrap, "sandbox"))
    );
    // Inputs are replaced whole: `extra` of the user layer is gone.
    let inputs = settings.inputs.as_ref().expect("inputs");
    assert_eq!(inputs.value, Inputs::from([("ticket".to_string(), serde_json::json!("R-7"))]));
    assert_eq!(inputs.origin.layer, Layer::RunConfig);
    let labels: Vec<(&str, &str, Layer)> = settings
        .labels
        .iter()
        .map(|(key, set)| (key.as_str(), set.value.as_str(), set.origin.layer))
        .collect();
    assert_eq!(labels, [("owner", "ada", Layer::User), ("team", "payments", Layer::Project)]);
    assert_eq!(settings.mcp_servers["files"].value.command, ["w"]);
    assert_eq!(settings.graph.as_ref().map(|set| set.value.clone()), Some(root.join("flows/flow.dot")));
    assert_eq!(
        settings.goal.as_ref().map(|set| set.value.clone()),
        Some(Goal::File(root.join("flows/goal.md")))
    );
    assert_eq!(settings.max_output.as_ref().map(|set| set.value), Some(2_000_000));
    assert_eq!(settings.max_cost.as_ref().map(|set| set.value), Some(3.0));
    assert!(settings.goal_text().unwrap_err().to_string().contains("goal_file: cannot read"));
    fixture.write("flows/goal.md", "  Ship it.\n");
    assert_eq!(settings.goal_text().expect("goal").as_deref(), Some("Ship it."));

    // The environment is over every file.
    let settings = fixture.load(&[("FABRO_LLM_MODEL", "env-model")]).expect("valid");
    let model = settings.model.expect("model");
    assert_eq!((model.value.as_str(), model.origin.layer), ("env-model", Layer::Environment));
    let files: Vec<(Layer, bool)> =
        settings.files.iter().map(|(layer, _, exists)| (*layer, *exists)).collect();
    assert_eq!(
        files,
        [
            (Layer::User, true),
            (Layer::Project, true),
            (Layer::Workflow, true),
            (Layer::Workflow, false),
            (Layer::RunConfig, true)
        ]
    );
}

#[test]
fn hooks_add_up_across_layers_and_a_named_one_replaces_its_namesake() {
    let fixture = Fixture::new();
    let hook = |name: &str, command: &str| {
        format!("[[run.hooks]]\nname = \"{name}\"\nevent = \"run_start\"\ntype = \"command\"\ncommand = \"{command}\"\n")
    };
    fixture.write("user/config.toml", &hook("notify", "user"));
    fixture.write(PROJECT_FILE, &format!("{}{}", hook("lint", "project"), hook("notify", "project")));
    fixture.write(
        "flows/fabro.toml",
        "[[hooks]]\nevent = \"run_complete\"\ntype = \"command\"\ncommand = \"beside\"\n",
    );
    let settings = fixture.load(&[]).expect("valid");
    let hooks: Vec<(&str, String)> = settings
        .hooks
        .hooks()
        .iter()
        .map(|hook| (hook.name.as_str(), hook.file.file_name().unwrap().to_string_lossy().into_owned()))
        .collect();
    assert_eq!(
        hooks,
        [
            ("notify", "project.toml".into()),
            ("lint", "project.toml".into()),
            ("fabro.toml hooks[0]", "fabro.toml".into())
        ]
    );
}

#[test]
fn mistakes_are_errors_at_their_place() {
    let cases = [
        (
            PROJECT_FILE,
            "[run]\ngoal = \"x\"\n\n[run.sandbox]\nprovider = \"lxc\"\n",
            ":5:12: run.sandbox.provider: `lxc` is not a sandbox",
        ),
        (
            PROJECT_FILE,
            "[run.agent]\npermissions = \"all\"\n",
            ":2:15: run.agent.permissions: `all` is not read-only",
        ),
        (
            PROJECT_FILE,
            "[workflow]\ngraph = \"x.dot\"\n",
            ":2:9: `[workflow] graph` belongs in a run configuration",
        ),
        (
            PROJECT_FILE,
            "[run]\nworking_dir = \"..\"\n",
            ":2:15: `working_dir` belongs in a run configuration",
        ),
        (
            PROJECT_FILE,
            "[run.limits]\nmax_output = \"lots\"\n",
            ":2:14: run.limits.max_output: `lots` is not a size",
        ),
        (PROJECT_FILE, "[run.inputs]\n\"bad-name\" = 1\n", "run.inputs: `bad-name` is not an input name"),
        (
            PROJECT_FILE,
            "[run]\ngoal = \"a\"\ngoal_file = \"b.md\"\n",
            ":2:8: set `goal` or `goal_file`, not both",
        ),
        ("flows/workflow.toml", "[run.labels]\n\"te am\" = \"x\"\n", "is not a label key"),
        ("flows/workflow.toml", "_version = 2\n", ":1:12: `_version = 2` is not a schema version"),
        (
            "user/config.toml",
            "default_model = \"a\"\n[run.model]\nname = \"b\"\n",
            "`run.model.name` and `default_model` set the same setting",
        ),
        (
            "flows/run.toml",
            "[run.modle]\nname = \"b\"\n",
            ":1:6: unknown key `modle` (did you mean `model`?)",
        ),
    ];
    for (file, text, expected) in cases {
        let fixture = Fixture::new();
        fixture.write(file, text);
        let error = fixture.load(&[]).unwrap_err().to_string();
        assert!(error.contains(expected), "{file}: {text:?}\n  gave {error}\n  not {expected}");
        assert!(error.contains(&*fixture.dir.path().join(file).display().to_string()), "{error}");
    }
}

#[test]
fn a_run_configuration_names_its_workflow() {
    let fixture = Fixture::new();
    let path = fixture.write("run.toml", "[run]\ngoal = \"x\"\n");
    let error = read_run_config(&path, &ConfigFiles::from_disk()).unwrap_err().to_string();
    assert!(error.contains("a run configuration names its workflow: add `[workflow]`"), "{error}");
    let path =
        fixture.write("run.toml", "[workflow]\ngraph = \"w/flow.dot\"\n[run]\nworking_dir = \"repo\"\n");
    let config = read_run_config(&path, &ConfigFiles::from_disk()).expect("valid");
    assert_eq!(config.graph.expect("graph").value, fixture.dir.path().join("w/flow.dot"));
    assert_eq!(config.working_dir.expect("dir").value, fixture.dir.path().join("repo"));
    assert!(is_run_config(Path::new("ci/Run.TOML")) && !is_run_config(Path::new("flow.dot")));
}

#[test]
fn a_resume_sees_only_the_files_its_run_started_with() {
    let fixture = Fixture::new();
    fixture.write("user/config.toml", "default_model = \"m\"\n");
    let started = ConfigFiles::from_disk();
    load_with(&fixture.sources(), &started, &|_| None).expect("valid");
    let saved = crate::run_dir::layout::config_files(fixture.dir.path());
    started.save(&saved).expect("save");
    // Written after the start (by a stage, say): a resume does not obey it.
    fixture.write(
        PROJECT_FILE,
        "[[run.hooks]]\nevent = \"run_start\"\ntype = \"command\"\ncommand = \"planted\"\n",
    );
    let resumed = ConfigFiles::saved_at(&saved).expect("saved");
    let settings = load_with(&fixture.sources(), &resumed, &|_| None).expect("valid");
    assert!(settings.hooks.is_empty());
    assert_eq!(settings.model.expect("model").value, "m");
}

#[test]
fn the_project_is_the_work_directory_s_repository() {
    let fixture = Fixture::new();
    git2::Repository::init(fixture.dir.path()).expect("init");
    let nested = fixture.dir.path().join("src/deep");
    std::fs::create_dir_all(&nested).expect("mkdir");
    let sources = Sources::for_run(&nested, Some(Path::new("flows/flow.dot")), None);
    let project = sources.project.expect("project");
    assert!(project.ends_with(PROJECT_FILE));
    assert_eq!(
        project.parent().and_then(Path::parent).map(|root| root.canonicalize().expect("root")),
        Some(fixture.dir.path().canonicalize().expect("root"))
    );
    assert_eq!(sources.workflow, Some(PathBuf::from("flows").join(WORKFLOW_FILE)));
}

#[test]
fn the_config_file_s_own_keys_are_checked_with_the_nearest_key_too() {
    let fixture = Fixture::new();
    fixture.write("user/config.toml", "request_timeout = \"90s\"\ndefualt_model = \"m\"\n");
    let error = fixture.load(&[]).unwrap_err().to_string();
    assert!(
        error.contains("config.toml:2:1: unknown key `defualt_model` (did you mean `default_model`?)"),
        "{error}"
    );
}
