// YAML loading, key=value overrides, schema resolution and its error messages.
#include <fmt/format.h>

#include "hone/config/config.hpp"
#include "support/check.hpp"

namespace hone::test {
namespace {

Schema schema() {
  Schema s;
  s.add({"output_dir", ValueType::string, nullptr, "where runs are written", {}, true});
  s.add({"batch_size", ValueType::integer, 8, "sequences per device"}, Range::positive());
  s.add({"optimizer.lr", ValueType::number, 3e-4, "peak learning rate"}, Range::not_negative());
  s.add({"optimizer.betas", ValueType::number_list, Json::array({0.9, 0.95}), "AdamW betas"}, Range::fraction());
  s.add({"lr_scheduler.name", ValueType::string, "cosine", "schedule", {"constant", "linear", "cosine", "wsd"}});
  s.add({"resume", ValueType::string, nullptr, "latest or a path"});
  s.add({"enable_activation_checkpointing", ValueType::boolean, false, "recompute layers in backward"});
  return s;
}

TEST(Config, YamlScalarsGetTheirTypes) {
  Config c = Config::from_yaml(R"(
a: 12
b: 1.5e-4
c: true
d: "12"
e: [1, 2.5]
f: ~
g: text
nested: {x: {y: 3}}
)",
                               "test.yaml");
  EXPECT_TRUE(c.find("a")->is_number_integer());
  EXPECT_DOUBLE_EQ(c.get<double>("b"), 1.5e-4);
  EXPECT_TRUE(c.get<bool>("c"));
  EXPECT_EQ(c.get<std::string>("d"), "12");  // quoted: stays a string
  EXPECT_EQ(c.get<std::vector<double>>("e"), (std::vector<double>{1, 2.5}));
  EXPECT_FALSE(c.has("f"));
  EXPECT_EQ(c.get<int64_t>("nested.x.y"), 3);
  EXPECT_NE(error_of([&] { c.get<int64_t>("b"); }).find("'b' must be an integer"), std::string::npos);
  // YAML's own tags: !!str keeps the text; an application's tag is refused,
  // not read as its text (output_dir: !env HOME made a folder named HOME).
  const Config tagged = Config::from_yaml("a: !!str 32\nb: !!int 3\n", "tags.yaml");
  EXPECT_EQ(tagged.get<std::string>("a"), "32");
  EXPECT_EQ(tagged.get<int64_t>("b"), 3);
  EXPECT_EQ(error_of([] { Config::from_yaml("a: 1\noutput_dir: !env HOME\n", "env.yaml"); }),
            "env.yaml:2: the YAML tag !env is not one hone reads (an environment variable is ${oc.env:NAME})");
  // One document: a second (after ---) was dropped unread; an empty one after the first is nothing.
  EXPECT_EQ(error_of([] { Config::from_yaml("max_steps: 2\n---\nmax_steps: 7\n", "two.yaml"); }),
            "two.yaml:3: a second YAML document (after ---): a config is one document");
  EXPECT_EQ(Config::from_yaml("max_steps: 2\n---\n", "trailing.yaml").get<int64_t>("max_steps"), 2);
}

// Aliases of aliases ("billion laughs": 9 levels of 9 are 387 million values
// from ten lines) are refused once they pass 100,000 values, not expanded
// until memory runs out; aliases of a few values are ordinary YAML.
TEST(Config, KeysAreWords) {
  EXPECT_EQ(error_of([] { Config::from_yaml("model:\n  ? [a, b]\n  : c\n", "run.yaml"); }),
            "run.yaml:2: a key must be a word, not a list");
  Config c = Config::from_yaml("output_dir: x\n", "run.yaml");  // an override that is no config: its text
  c.apply_override("optimizer.betas={[a]: b}");
  EXPECT_EQ(error_of([&] { schema().resolve(c); }),
            "the command line: 'optimizer.betas' must be a list of numbers, got \"{[a]: b}\"");
}

// YAML's merge key, as configs that share settings write it: the mapping's own keys win.
TEST(Config, MergeKeysFillInTheKeysAMappingLeavesOut) {
  const Config c = Config::from_yaml(
      "base: &base\n  lr: 0.01\n  weight_decay: 0.2\noptimizer:\n  <<: *base\n  lr: 0.02\n", "run.yaml");
  EXPECT_EQ(c.get<double>("optimizer.lr"), 0.02);
  EXPECT_EQ(c.get<double>("optimizer.weight_decay"), 0.2);
  EXPECT_EQ(error_of([] { Config::from_yaml("a:\n  <<: 5\n", "run.yaml"); }),
            "run.yaml:2: '<<' merges mappings, not a value");
}

TEST(Config, AliasesThatExpandWithoutEndAreRefused) {
  std::string bomb = "x0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n";
  for (int level = 1; level < 10; ++level) {
    bomb += fmt::format("x{}: &a{} [", level, level);
    for (int i = 0; i < 9; ++i) bomb += fmt::format("{}*a{}", i ? ", " : "", level - 1);
    bomb += "]\n";
  }
  EXPECT_EQ(error_of([&] { Config::from_yaml(bomb, "bomb.yaml"); }),
            "bomb.yaml: more than 100000 values (YAML aliases that expand without end?)");
  const Config c = Config::from_yaml("base: &b {lr: 0.1}\nother: *b\n", "aliases.yaml");
  EXPECT_DOUBLE_EQ(c.get<double>("other.lr"), 0.1);
  // An alias inside what it names nests without end (it overflowed the stack).
  for (const char* cycle : {"a: &a [*a]\n", "a: &a {b: *a}\n"}) {
    EXPECT_EQ(error_of([&] { Config::from_yaml(cycle, "cycle.yaml"); }),
              "cycle.yaml:1: values nested more than 64 deep (a YAML alias inside what it names?)")
        << cycle;
  }
}

TEST(Config, OverridesSetNestedKeysAndLists) {
  Config c = Config::from_yaml("optimizer: {lr: 0.1}\n", "base.yaml");
  c.apply_override("optimizer.lr=2e-3");
  c.apply_override("optimizer.betas=[0.8, 0.99]");
  c.apply_override("output_dir=runs/x");
  c.apply_override("resume=null");
  EXPECT_DOUBLE_EQ(c.get<double>("optimizer.lr"), 2e-3);
  EXPECT_EQ(c.get<std::vector<double>>("optimizer.betas"), (std::vector<double>{0.8, 0.99}));
  EXPECT_EQ(c.get<std::string>("output_dir"), "runs/x");
  EXPECT_FALSE(c.has("resume"));
  EXPECT_NE(error_of([&] { c.apply_override("no_equals_sign"); }).find("key=value"), std::string::npos);
  // hone ls shows unset defaults as '-'; typed as a value it points to null.
  EXPECT_NE(error_of([&] { c.apply_override("tokenizer.path=-"); }).find("unset one with tokenizer.path=null"),
            std::string::npos);
  // torchtune's ~key removes a key, or a section, as if the config never gave it (its default applies).
  c.apply_override("~optimizer.lr");
  EXPECT_FALSE(c.has("optimizer.lr"));
  EXPECT_TRUE(c.has("optimizer.betas"));
  c.apply_override("~optimizer");
  EXPECT_FALSE(c.has("optimizer"));
  c.apply_override("~no.such.key");  // nothing to remove: a key of no setting, named when resolved
  EXPECT_EQ(error_of([&] { schema().resolve(c); }), "the command line: ~no.such.key: unknown key 'no.such.key'");
  Config typo = Config::from_yaml("output_dir: x\n", "run.yaml");
  typo.apply_override("~optimizer.lrr");
  EXPECT_EQ(error_of([&] { schema().resolve(typo); }),
            "the command line: ~optimizer.lrr: unknown key 'optimizer.lrr' (did you mean '~optimizer.lr'?)");
  // A key the file holds that hone has not (another tool's) is removed, so the config resolves.
  Config foreign = Config::from_yaml("output_dir: x\ncompile: true\n", "run.yaml");
  foreign.apply_override("~compile");
  EXPECT_EQ(schema().resolve(foreign).find("compile"), nullptr);
  EXPECT_NE(error_of([&] { c.apply_override("~output_dir=x"); }).find("~KEY removes a key"), std::string::npos);
  // YAML 1.1's yes/no/on/off are booleans where a key is one, as PyYAML reads them; elsewhere text.
  for (const auto& [text, value] : {std::pair{"yes", true}, {"On", true}, {"NO", false}, {"off", false}}) {
    Config b = Config::from_yaml(fmt::format("output_dir: x\nenable_activation_checkpointing: {}\n", text), "run.yaml");
    EXPECT_EQ(schema().resolve(b).get<bool>("enable_activation_checkpointing"), value) << text;
  }
  EXPECT_NE(error_of([&] {
              schema().resolve(Config::from_yaml("output_dir: x\nenable_activation_checkpointing: y\n", "run.yaml"));
            }).find("must be true or false"),
            std::string::npos);
  EXPECT_NE(error_of([&] { c.apply_override("~"); }).find("~KEY removes a key"), std::string::npos);
  // A section set to null is unset too: its keys take their defaults.
  Config nulled = Config::from_yaml("output_dir: x\noptimizer: {lr: 0.1}\n", "base.yaml");
  nulled.apply_override("optimizer=null");
  EXPECT_DOUBLE_EQ(schema().resolve(nulled).get<double>("optimizer.lr"), 3e-4);
}

// A string key takes its override as written where YAML would read the text as
// anything else (a mapping, a list, a comment, a number, another string, no YAML
// at all); a quoted whole is unquoted, and null still unsets it. Other keys keep
// YAML's reading.
TEST(Schema, StringOverridesAreTakenAsWritten) {
  const auto resolved_output_dir = [](const std::string& text) {
    Config c = Config::from_yaml("batch_size: 2\n", "run.yaml");
    c.apply_override("output_dir=" + text);
    c.apply_override("resume=" + text);
    const Config r = schema().resolve(c);
    EXPECT_EQ(r.find("resume")->dump(), r.find("output_dir")->dump()) << text;
    return r.get<std::string>("output_dir");
  };
  EXPECT_EQ(resolved_output_dir("Note: keep this"), "Note: keep this");
  EXPECT_EQ(resolved_output_dir("[INST] {prompt} [/INST]"), "[INST] {prompt} [/INST]");
  EXPECT_EQ(resolved_output_dir("#hashtag"), "#hashtag");
  EXPECT_EQ(resolved_output_dir("2024"), "2024");
  EXPECT_EQ(resolved_output_dir("yes"), "yes");
  EXPECT_EQ(resolved_output_dir("{unclosed"), "{unclosed");
  EXPECT_EQ(resolved_output_dir("'quoted: text'"), "quoted: text");
  EXPECT_EQ(resolved_output_dir("runs/x"), "runs/x");
  // Text YAML reads as another string: a line break folded or what follows it
  // dropped, a comment after " #", an anchor, a tag, quotes inside.
  EXPECT_EQ(resolved_output_dir("First line\nSecond line"), "First line\nSecond line");
  EXPECT_EQ(resolved_output_dir("line one\n  indented two"), "line one\n  indented two");
  EXPECT_EQ(resolved_output_dir("Tag this #news"), "Tag this #news");
  EXPECT_EQ(resolved_output_dir("&anchor text"), "&anchor text");
  EXPECT_EQ(resolved_output_dir("!tag x"), "!tag x");
  EXPECT_EQ(resolved_output_dir("\"double\" and 'single'"), "\"double\" and 'single'");
  EXPECT_EQ(resolved_output_dir("\"''\""), "''");  // a quoted whole is unquoted

  Config unset = Config::from_yaml("output_dir: x\nresume: latest\n", "run.yaml");
  unset.apply_override("resume=null");
  EXPECT_FALSE(schema().resolve(unset).has("resume"));

  Config number = Config::from_yaml("output_dir: x\n", "run.yaml");
  number.apply_override("optimizer.betas=[0.9, 0.95");  // no YAML: named with its text
  EXPECT_EQ(error_of([&] { schema().resolve(number); }),
            "the command line: 'optimizer.betas' must be a list of numbers, got \"[0.9, 0.95\"");
}

// A section overridden after one of its string keys: the key is gone (this crashed).
TEST(Schema, ASectionOverriddenAfterItsKeyIsNamed) {
  Config c = Config::from_yaml("output_dir: x\n", "run.yaml");
  c.apply_override("lr_scheduler.name=linear");
  c.apply_override("lr_scheduler={}");  // a section with no keys given: its defaults
  EXPECT_EQ(schema().resolve(c).get<std::string>("lr_scheduler.name"), "cosine");
  // A section given a value says that it takes keys.
  c.apply_override("lr_scheduler=5");
  EXPECT_EQ(error_of([&] { schema().resolve(c); }),
            "the command line: 'lr_scheduler' is a section: it takes keys (lr_scheduler.name ...), not 5 (hone ls "
            "RECIPE lists them)");
  // A key of a section written with a dot in a file would be no key at all (its default taken).
  EXPECT_EQ(error_of([] {
              schema().resolve(Config::from_yaml("output_dir: x\noptimizer: {betas: [0.9, 0.95]}\noptimizer.lr: 1\n",
                                                 "run.yaml"));
            }),
            "run.yaml:3: 'optimizer.lr' is one YAML key with a dot in it, which the config would not read: write it "
            "in its section (optimizer: {lr: ...}); key=value on the command line takes dotted keys");
  EXPECT_EQ(error_of([] { schema().resolve(Config::from_yaml("output_dir: x\noptimizer: [1, 2]\n", "run.yaml")); }),
            "run.yaml:2: 'optimizer' is a section: it takes keys (optimizer.lr ...), not [1,2] (hone ls RECIPE lists "
            "them)");
}

TEST(Schema, FillsDefaultsAndKeepsUserValues) {
  Config user = Config::from_yaml("output_dir: runs/a\noptimizer:\n  lr: 0.01\n", "a.yaml");
  Config r = schema().resolve(user);
  EXPECT_EQ(r.get<int64_t>("batch_size"), 8);
  EXPECT_DOUBLE_EQ(r.get<double>("optimizer.lr"), 0.01);
  EXPECT_EQ(r.get<std::string>("lr_scheduler.name"), "cosine");
  // The resolved config round-trips through YAML.
  Config again = schema().resolve(Config::from_yaml(r.to_yaml(), "resolved.yaml"));
  EXPECT_EQ(again.tree(), r.tree());
  // Strings that read as numbers, booleans or null unquoted are written quoted.
  for (const char* name : {"123", "0042", "true", "null", "1e3"}) {
    Config odd = schema().resolve(Config::from_yaml(fmt::format("output_dir: '{}'\n", name), "odd.yaml"));
    const Config back = schema().resolve(Config::from_yaml(odd.to_yaml(), "resolved.yaml"));
    EXPECT_EQ(back.get<std::string>("output_dir"), name) << odd.to_yaml();
  }
}

// One string where a list of strings goes is a list of it (vLLM's stop="x").
TEST(Schema, OneStringIsAListOfIt) {
  Schema s = schema();
  s.add({"stop", ValueType::string_list, Json::array(), "stop strings"});
  Config user = Config::from_yaml("output_dir: x\n", "a.yaml");
  user.apply_override("stop=Question:");
  EXPECT_EQ(s.resolve(user).get<std::vector<std::string>>("stop"), std::vector<std::string>{"Question:"});
}

// A whole number written as a float (1e9, as token budgets are) is an integer.
TEST(Schema, WholeFloatsAreIntegers) {
  Config r = schema().resolve(Config::from_yaml("output_dir: x\nbatch_size: 1.6e1\n", "a.yaml"));
  EXPECT_TRUE(r.find("batch_size")->is_number_integer());
  EXPECT_EQ(r.get<int64_t>("batch_size"), 16);
  EXPECT_EQ(error_of([] { schema().resolve(Config::from_yaml("output_dir: x\nbatch_size: 1e300\n", "a.yaml")); }),
            "a.yaml:2: 'batch_size' is 1e+300, past the whole numbers a setting holds exactly (2^53)");
  // YAML reads a long integer as a float: its range says what is wrong with it, where it has one.
  EXPECT_EQ(error_of([] {
              schema().resolve(Config::from_yaml("output_dir: x\nbatch_size: -99999999999999999999\n", "a.yaml"));
            }),
            "a.yaml:2: 'batch_size' must be positive, got -1e+20");
}

TEST(Schema, ErrorsNameTheKeyAndSuggest) {
  auto resolve = [](const std::string& yaml) {
    return error_of([&] { schema().resolve(Config::from_yaml(yaml, "run.yaml")); });
  };
  EXPECT_EQ(resolve("output_dir: x\noptimizer: {lrr: 1}\n"),
            "run.yaml:2: unknown key 'optimizer.lrr' (did you mean 'optimizer.lr'?)");
  EXPECT_EQ(resolve("output_dir: x\nbatch_sise: 4\n"), "run.yaml:2: unknown key 'batch_sise' (did you mean 'batch_size'?)");
  EXPECT_EQ(resolve("output_dir: x\ncompletely_unrelated_thing: 4\n"), "run.yaml:2: unknown key 'completely_unrelated_thing'");
  EXPECT_EQ(resolve("output_dir: x\nbatch_size: 2.5\n"), "run.yaml:2: 'batch_size' must be an integer, got 2.5");
  // A path key: '~' is not expanded (it made a folder named ~), and an empty path names nothing.
  EXPECT_EQ(resolve("output_dir: ~/runs/a\n"),
            "run.yaml:1: 'output_dir' is \"~/runs/a\": hone does not expand '~' (a folder named ~ would be made here); "
            "write the home folder's path, or ${oc.env:HOME}/runs/a");
  EXPECT_EQ(resolve("output_dir: x\nresume: '~/runs/a/step_2'\n").substr(0, 32), "run.yaml:2: 'resume' is \"~/runs/");
  EXPECT_EQ(resolve("output_dir: ''\n"), "run.yaml:1: 'output_dir' is empty: give a path (null leaves it unset)");
  EXPECT_EQ(resolve("output_dir: ~x\n"), "");  // a name that starts with ~ is a name
  EXPECT_EQ(resolve("output_dir: x\nlr_scheduler: {name: cosin}\n"),
            "run.yaml:2: 'lr_scheduler.name' is 'cosin'; expected one of constant, linear, cosine, wsd (did you mean "
            "'cosine'?)");
  EXPECT_EQ(resolve("batch_size: 2\n"), "run.yaml: 'output_dir' is required (where runs are written)");
  EXPECT_NE(resolve("a: [1\n").find("run.yaml:"), std::string::npos);  // YAML syntax errors name the file
  EXPECT_NE(resolve("a: 1\na: 2\n").find("appears twice"), std::string::npos);
  // Another tool's key is named as such, with what to give instead, not a near miss.
  Schema with_foreign = schema();
  with_foreign.add_foreign("optimizer.lr_decay", "use lr_scheduler.name");
  Schema merged;
  merged.add(with_foreign);  // foreign keys travel with the schema they were added to
  EXPECT_EQ(error_of([&] { merged.resolve(Config::from_yaml("output_dir: x\noptimizer: {lr_decay: 1}\n", "run.yaml")); }),
            "run.yaml:2: 'optimizer.lr_decay': use lr_scheduler.name");
  // Every key the schema lacks in one error; a foreign section is named once, whatever it holds.
  with_foreign.add_foreign("scheduler", "use lr_scheduler");
  EXPECT_EQ(error_of([&] {
              with_foreign.resolve(Config::from_yaml(
                  "output_dir: x\nbatch_sise: 4\nscheduler: {name: cosine, t_warmup: 10ba}\noptimizer: {lrr: 1}\n",
                  "run.yaml"));
            }),
            "run.yaml: 3 keys hone does not take: unknown key 'batch_sise' (did you mean 'batch_size'?); 'scheduler': "
            "use lr_scheduler; unknown key 'optimizer.lrr' (did you mean 'optimizer.lr'?)");
  // Another tool's value of a key hone has is named among them, with its own key's value left alone.
  with_foreign.add_foreign_value("lr_scheduler.name", "cosine_with_warmup", "use lr_scheduler.name: cosine");
  Schema merged_values;
  merged_values.add(with_foreign);
  EXPECT_EQ(error_of([&] {
              merged_values.resolve(
                  Config::from_yaml("output_dir: x\nlr_scheduler: {name: cosine_with_warmup}\nscheduler: 1\n", "run.yaml"));
            }),
            "run.yaml: 2 keys hone does not take: 'lr_scheduler.name: cosine_with_warmup': use lr_scheduler.name: "
            "cosine; 'scheduler': use lr_scheduler");
}

// Numbers outside their key's range fail when the config is resolved (so
// `hone validate` catches them), every number of a list included.
TEST(Schema, NumbersOutsideTheirRangeAreErrors) {
  auto resolve = [](const std::string& yaml) {
    return error_of([&] { schema().resolve(Config::from_yaml("output_dir: x\n" + yaml, "run.yaml")); });
  };
  EXPECT_EQ(resolve("batch_size: 0\n"), "run.yaml:2: 'batch_size' must be positive, got 0");
  EXPECT_EQ(resolve("optimizer: {lr: -0.5}\n"), "run.yaml:2: 'optimizer.lr' must not be negative, got -0.5");
  EXPECT_EQ(resolve("optimizer: {betas: [0.9, 1.0]}\n"),
            "run.yaml:2: 'optimizer.betas' must be in [0, 1), got [0.9,1.0]");
  // The ends of a range: 0 is not positive but is not negative; 0 is in [0, 1), 1 is not.
  EXPECT_EQ(resolve("batch_size: 1\noptimizer: {lr: 0, betas: [0, 0.999]}\n"), "");
  // A bad value given as key=value is the command line's, not the file's.
  Config user = Config::from_yaml("output_dir: x\nbatch_size: 2\n", "run.yaml");
  user.apply_override("optimizer.betas=[0.9, 2]");
  EXPECT_EQ(error_of([&] { schema().resolve(user); }),
            "the command line: 'optimizer.betas' must be in [0, 1), got [0.9,2]");
  user.apply_override("optimizer.betas=[0.9, 0.99]");
  user.apply_override("batch_sise=3");
  EXPECT_EQ(error_of([&] { schema().resolve(user); }),
            "the command line: unknown key 'batch_sise' (did you mean 'batch_size'?)");
  Config torchtune = Config::from_yaml("output_dir: x\n", "run.yaml");
  torchtune.apply_override("optimizer._component_=torch.optim.AdamW");
  EXPECT_NE(error_of([&] { schema().resolve(torchtune); })
                .find("the command line: 'optimizer._component_' is torchtune's: its _component_ keys name Python "
                      "classes"),
            std::string::npos);
  EXPECT_EQ(Range{.low = 2}.requirement(), "must be at least 2");
  EXPECT_EQ((Range{.low = 0, .high = 1, .low_open = true}).requirement(), "must be in (0, 1]");
  EXPECT_EQ((Range{.low = 0, .high = 3}).requirement(), "must be in [0, 3]");
}

// Errors about values name where they came from: the file, the command line,
// or (a check of a whole section) the file with the overrides among them.
TEST(Config, ErrorsNameWhereTheValuesCameFrom) {
  Config c = Config::from_yaml("model: {dim: 64, n_heads: 4}\nbatch_size: 2\n", "run.yaml");
  c.apply_override("model.dim=7");
  c.apply_override("optimizer.lr=fast");
  EXPECT_EQ(c.origin_of_section("model"), "run.yaml with model.dim from the command line");
  EXPECT_EQ(c.origin_of_section("batch_size"), "run.yaml");
  EXPECT_EQ(c.origin_of_section("optimizer"), "run.yaml with optimizer.lr from the command line");
  c.apply_override("model.n_heads=2");
  EXPECT_EQ(c.origin_of_section("model"), "run.yaml with model.dim, model.n_heads from the command line");
  // The file alone set a key where no override is at, above or below it.
  EXPECT_TRUE(c.set_by_file("batch_size"));
  EXPECT_FALSE(c.set_by_file("model.dim"));
  EXPECT_FALSE(c.set_by_file("model"));
  c.apply_override("tasks.a.path=lm.jsonl");
  EXPECT_FALSE(c.set_by_file("tasks"));
  EXPECT_FALSE(c.set_by_file("tasks.a"));
  EXPECT_EQ(c.how_to_drop_the_files("batch_size", "tasks"), " (add batch_size=null to drop run.yaml's batch_size)");
  EXPECT_EQ(c.how_to_drop_the_files("model.dim", "tasks"), "");
  EXPECT_EQ(error_of([&] { c.get<double>("optimizer.lr"); }), "the command line: 'optimizer.lr' must be a number, got \"fast\"");
  EXPECT_EQ(error_of([&] { c.get<bool>("batch_size"); }), "run.yaml: 'batch_size' has the wrong type: 2");
  c.apply_override("model={dim: 8}");
  EXPECT_EQ(c.origin_of_section("model"), "the command line");  // replaced whole
  Config overrides_only;
  overrides_only.apply_override("model.dim=7");
  EXPECT_EQ(overrides_only.origin_of_section("model"), "the command line");
}

// OmegaConf's interpolations, as torchtune's and LLM Foundry's configs write them.
TEST(Schema, InterpolationsTakeTheValuesTheyReferTo) {
  ::setenv("HONE_TEST_RUNS", "/scratch", 1);
  ::unsetenv("HONE_TEST_UNSET");
  Config user = Config::from_yaml(R"(
variables:
  batch: 4
  name: run-${variables.batch}
output_dir: ${oc.env:HONE_TEST_RUNS}/${variables.name}
batch_size: ${variables.batch}
resume: ${output_dir}/step_${batch_size}
optimizer:
  lr: ${.betas}
  betas: [0.5, 0.6]
lr_scheduler:
  name: ${oc.env:HONE_TEST_UNSET,linear}
)",
                                  "run.yaml");
  user.apply_override("optimizer.lr=${..batch_size}");
  const Config c = schema().resolve(user);
  EXPECT_EQ(c.get<std::string>("output_dir"), "/scratch/run-4");
  EXPECT_EQ(c.get<int64_t>("batch_size"), 4) << "a string that is only a reference takes the value's type";
  EXPECT_EQ(c.get<std::string>("resume"), "/scratch/run-4/step_4");
  EXPECT_DOUBLE_EQ(c.get<double>("optimizer.lr"), 4.0) << "relative to the key's section: .. is its parent";
  EXPECT_EQ(c.get<std::string>("lr_scheduler.name"), "linear");
  EXPECT_EQ(c.find("variables"), nullptr) << "LLM Foundry's variables are only referred to";

  // An override changes what refers to it; unset keys refer to their defaults; \${ is text.
  user.apply_override("variables.batch=16");
  user.apply_override("lr_scheduler.name=null");
  user.apply_override(R"(resume='\${not}/${batch_size}/${lr_scheduler.name}')");
  const Config changed = schema().resolve(user);
  EXPECT_EQ(changed.get<std::string>("output_dir"), "/scratch/run-16");
  EXPECT_EQ(changed.get<std::string>("resume"), "${not}/16/cosine");

  // A blank variable (LLM Foundry's `data_remote:`) is null where it is referred to, as OmegaConf reads it.
  const Config blank = schema().resolve(
      Config::from_yaml("variables:\n  remote:\noutput_dir: x\nresume: ${variables.remote}\n", "run.yaml"));
  EXPECT_FALSE(blank.has("resume"));
  // A quoted default is the text inside its quotes.
  const Config quoted = schema().resolve(Config::from_yaml(
      "output_dir: '${oc.env:HONE_TEST_UNSET,\"runs/q\"}'\nresume: ${oc.env:HONE_TEST_UNSET, 'a b' }\n", "run.yaml"));
  EXPECT_EQ(quoted.get<std::string>("output_dir"), "runs/q");
  EXPECT_EQ(quoted.get<std::string>("resume"), "a b");

  const auto error = [](const std::string& yaml) {
    return error_of([&] { schema().resolve(Config::from_yaml("output_dir: x\n" + yaml, "run.yaml")); });
  };
  EXPECT_EQ(error("resume: ${ouptut_dir}\n"),
            "run.yaml: 'resume': ${ouptut_dir}: the config has no key 'ouptut_dir' (did you mean 'output_dir'?)");
  EXPECT_EQ(error("resume: ${a}\na: ${resume}\n"),
            "run.yaml: 'resume': the interpolations refer to each other in a circle: a -> resume -> a");
  // References that double at each level would take 2^40 bytes and forever; each key is resolved once.
  std::string doubling = "variables:\n  v0: ab\n";
  for (int level = 1; level <= 40; ++level)
    doubling += fmt::format("  v{}: ${{variables.v{}}}-${{variables.v{}}}\n", level, level - 1, level - 1);
  EXPECT_EQ(error(doubling + "resume: ${variables.v40}\n"),
            "run.yaml: 'variables.v21': the interpolations bring in more than 16.00 MiB (references that double at "
            "each level?)");
  // A chain of references each to the next, deeper than any config's (30,000 overflowed the stack).
  std::string chain = "variables:\n";
  for (int link = 1; link < 1000; ++link) chain += fmt::format("  v{}: ${{variables.v{}}}\n", link, link + 1);
  EXPECT_EQ(error(chain + "  v1000: ab\nresume: ${variables.v1}\n"),
            "run.yaml: 'variables.v101': a chain of more than 100 references, each to the next (variables.v2 -> "
            "variables.v3 -> ...)");
  EXPECT_EQ(schema()
                .resolve(Config::from_yaml("variables:\n  v0: ab\n  v1: ${variables.v0}-${variables.v0}\n  v2: "
                                           "${variables.v1}-${variables.v1}\noutput_dir: ${variables.v2}\n",
                                           "run.yaml"))
                .get<std::string>("output_dir"),
            "ab-ab-ab-ab");
  EXPECT_EQ(error("resume: ${oc.env:HONE_TEST_UNSET}\n"),
            "run.yaml: 'resume': ${oc.env:HONE_TEST_UNSET}: the environment variable HONE_TEST_UNSET is not set");
  EXPECT_EQ(error("resume: ${oc.select:a}\n"),
            "run.yaml: 'resume': ${oc.select:a}: the resolver 'oc.select' is not one hone has (it has oc.env and "
            "oc.decode)");
  // oc.env's default null is None, as OmegaConf's; oc.decode reads an environment variable's text as a value.
  ::setenv("HONE_TEST_STEPS", "7", 1);
  const Config env = schema().resolve(Config::from_yaml(
      "output_dir: x\nresume: ${oc.env:HONE_TEST_UNSET,null}\nbatch_size: ${oc.decode:${oc.env:HONE_TEST_STEPS,2}}\n",
      "run.yaml"));
  EXPECT_FALSE(env.has("resume"));
  EXPECT_EQ(env.get<int64_t>("batch_size"), 7);
  // A list's element, by OmegaConf's a.b.1 or a.b[1].
  const Config listed = schema().resolve(Config::from_yaml(
      "output_dir: x\noptimizer: {betas: [0.5, 0.6], lr: '${.betas.1}'}\nresume: 'r${optimizer.betas[0]}'\n",
      "run.yaml"));
  EXPECT_DOUBLE_EQ(listed.get<double>("optimizer.lr"), 0.6);
  EXPECT_EQ(listed.get<std::string>("resume"), "r0.5");
  EXPECT_NE(error("optimizer: {betas: [0.5, 0.6], lr: '${.betas.2}'}\n").find("the config has no key 'optimizer.betas.2'"),
            std::string::npos);
  // Of a list left at its default too.
  EXPECT_DOUBLE_EQ(schema()
                       .resolve(Config::from_yaml("output_dir: x\noptimizer: {lr: '${optimizer.betas[1]}'}\n", "run.yaml"))
                       .get<double>("optimizer.lr"),
                   0.95);
  EXPECT_EQ(error("resume: x${output_dir\n"), "run.yaml: 'resume': 'x${output_dir' has an unclosed '${'");
  EXPECT_EQ(error("resume: ${..output_dir}\n"), "run.yaml: 'resume': ${..output_dir} refers above the top of the config");
  EXPECT_EQ(error("resume: at ${optimizer}\noptimizer: {lr: 1}\n"),
            "run.yaml: 'resume': 'at ${optimizer}' puts a section or list inside text");
  EXPECT_EQ(error("batch_size: ${output_dir}\n"), "run.yaml:2: 'batch_size' must be an integer, got \"x\"");
}

}  // namespace
}  // namespace hone::test
