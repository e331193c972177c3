// tests/text/jinja_test.cpp — unit tests of the Jinja engine. The table cases
// (tests/fixtures/text/templates/jinja_unit_cases.json) hold Jinja2's own output for each
// small template, produced by tools/make_jinja_unit_cases.py in transformers' environment:
// statements, loop variables, macros, namespace, whitespace control, Python-style printing,
// slicing, filters, tests and errors. The hand-written tests below check what the table
// cannot: error line numbers and messages.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "text/jinja/error.h"
#include "text/jinja/template.h"
#include "text/jinja/value.h"

namespace {

namespace fs = std::filesystem;
using ojson = nlohmann::ordered_json;
using rill::text::jinja::Template;
using rill::text::jinja::Value;

std::string render(const std::string& source, const ojson& ctx = ojson::object()) {
  return Template(source).render(rill::text::jinja::from_json(ctx));
}

std::string error_of(const std::string& source, const ojson& ctx = ojson::object()) {
  try {
    render(source, ctx);
  } catch (const rill::Error& e) {
    return e.what();
  }
  return "<no error>";
}

TEST(Jinja, MatchesJinja2OnUnitCases) {
  const fs::path path = fs::path(RILL_SOURCE_DIR) / "tests/fixtures/text/templates/jinja_unit_cases.json";
  std::ifstream in(path);
  ASSERT_TRUE(in) << "missing " << path;
  std::stringstream ss;
  ss << in.rdbuf();
  const ojson data = ojson::parse(ss.str());
  size_t n = 0;
  for (const ojson& c : data["cases"]) {
    ++n;
    const std::string name = c["name"].get<std::string>();
    const std::string source = c["template"].get<std::string>();
    SCOPED_TRACE(name + ": " + source);
    if (c.contains("expected")) {
      std::string got;
      try {
        got = render(source, c["context"]);
      } catch (const rill::Error& e) {
        ADD_FAILURE() << "unexpected error: " << e.what();
        continue;
      }
      EXPECT_EQ(got, c["expected"].get<std::string>());
    } else {
      EXPECT_NE(error_of(source, c["context"]), "<no error>") << "Jinja2 raised " << c["error"];
    }
  }
  EXPECT_GE(n, 100u);
}

TEST(Jinja, SyntaxErrorsNameTheTemplateLine) {
  EXPECT_NE(error_of("a\nb\n{{ x | nope }}").find("template line 3: unknown filter 'nope'"), std::string::npos);
  EXPECT_NE(error_of("a\n{% if x is nah %}{% endif %}").find("template line 2: unknown test 'nah'"), std::string::npos);
  EXPECT_NE(error_of("\n\n\n{% do x %}").find("template line 4: syntax error: unknown tag 'do'"), std::string::npos);
  EXPECT_NE(error_of("{% if x %}\nabc").find("'endif'"), std::string::npos);
  EXPECT_NE(error_of("x\n{{ (1 + }}").find("template line 2"), std::string::npos);
}

TEST(Jinja, RuntimeErrorsNameTheTemplateLine) {
  std::string e = error_of("line1\n{% for m in ms %}\n{{ m.a.b }}\n{% endfor %}", {{"ms", ojson::array({ojson::object()})}});
  EXPECT_NE(e.find("template line 3"), std::string::npos) << e;
  EXPECT_NE(e.find("'dict object' has no attribute 'a'"), std::string::npos) << e;
  e = error_of("\n{{ 'a' + 1 }}");
  EXPECT_NE(e.find("template line 2"), std::string::npos) << e;
  EXPECT_NE(error_of("{{ [1].append(2) }}").find("unsafe"), std::string::npos);
}

TEST(Jinja, RaiseExceptionMessageIsVerbatim) {
  Value ctx = Value::make_dict();
  ctx.dict->set("raise_exception", Value::function("raise_exception", [](rill::text::jinja::CallArgs& a) -> Value {
    throw rill::text::jinja::RaisedError(a.args.at(0).str());
  }));
  try {
    Template("x\n{% if true %}{{ raise_exception('Only user and assistant roles are supported!') }}{% endif %}")
        .render(ctx);
    FAIL() << "no error";
  } catch (const rill::Error& e) {
    EXPECT_STREQ(e.what(), "Only user and assistant roles are supported!");
  }
}

TEST(Jinja, GenerationBlockRendersInPlace) {
  EXPECT_EQ(render("a{% generation %}b{{ 1 }}{% endgeneration %}c"), "ab1c");
}

TEST(Jinja, TemplateIsReusableAcrossRenders) {
  Template t("{% set ns = namespace(n=0) %}{% for x in xs %}{% set ns.n = ns.n + x %}{% endfor %}{{ ns.n }}");
  EXPECT_EQ(t.render(rill::text::jinja::from_json(ojson{{"xs", {1, 2}}})), "3");
  EXPECT_EQ(t.render(rill::text::jinja::from_json(ojson{{"xs", {5}}})), "5");
}

}  // namespace
