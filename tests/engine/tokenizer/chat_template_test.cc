// engine/tokenizer/chat_template.h: chat templates rendered as transformers' apply_chat_template
// renders them. Fixture templates in chat_templates/ are written in the idiom of the public Llama
// 3, ChatML, Mistral, Llama 2, Gemma and Zephyr templates and must give exact prompts; feature
// snippets must give what Python jinja2 gives (the expectations below were rendered by it);
// where jinja2 is importable, render_jinja.py renders everything again and the outputs must be
// byte-identical. Malformed and hostile templates must fail with INVALID_ARGUMENT naming the
// place, never crash or hang.
#include "engine/tokenizer/chat_template.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

namespace saturn {
namespace {

using Messages = std::vector<ChatMessage>;

std::string ReadFile(const std::string& path) {
  std::stringstream ss;
  ss << std::ifstream(path, std::ios::binary).rdbuf();
  return ss.str();
}

std::string Fixture(const std::string& name) {
  const std::string text = ReadFile(std::string(SATURN_SOURCE_DIR) +
                                    "/tests/engine/tokenizer/chat_templates/" + name + ".jinja");
  EXPECT_FALSE(text.empty()) << "missing fixture " << name;
  return text;
}

const ChatMessage kSystem{"system", "You are terse. "};
const ChatMessage kUser1{"user", " Hello! "};
const ChatMessage kAssistant1{"assistant", "Hi. How can I help?"};
const ChatMessage kUser2{"user", "Count to 3."};

const Messages kSysUser = {kSystem, kUser1};
const Messages kUserOnly = {kUser1};
const Messages kMulti = {kSystem, kUser1, kAssistant1, kUser2};
const Messages kMultiNoSystem = {kUser1, kAssistant1, kUser2};
const Messages kTwoUsers = {kUser1, kUser1};

absl::StatusOr<std::string> RenderFixture(const std::string& name, const Messages& messages,
                                          bool add_generation_prompt) {
  auto t = ChatTemplate::Parse(Fixture(name));
  if (!t.ok()) return t.status();
  return t->Render(messages, add_generation_prompt, "<s>", "</s>");
}

std::string MustRender(const std::string& name, const Messages& messages, bool gen) {
  auto out = RenderFixture(name, messages, gen);
  EXPECT_TRUE(out.ok()) << name << ": " << out.status();
  return out.ok() ? *out : "";
}

void ExpectRaises(const std::string& name, const Messages& messages, const std::string& msg) {
  auto out = RenderFixture(name, messages, true);
  ASSERT_FALSE(out.ok()) << name << " rendered " << *out;
  EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(out.status().message(), msg);
}

const std::string kAlternate =
    "Conversation roles must alternate user/assistant/user/assistant/...";

TEST(ChatTemplateFixtures, Llama3) {
  const std::string head =
      "<s><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December "
      "2023\nToday Date: 26 Jul 2024\n\n";
  EXPECT_EQ(
      MustRender("llama3", kSysUser, false),
      head +
          "You are terse.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHello!<|eot_id|>");
  EXPECT_EQ(
      MustRender("llama3", kSysUser, true),
      head +
          "You are terse.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHello!<|eot_id|>"
          "<|start_header_id|>assistant<|end_header_id|>\n\n");
  EXPECT_EQ(MustRender("llama3", kMultiNoSystem, true),
            head +
                "<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHello!<|eot_id|>"
                "<|start_header_id|>assistant<|end_header_id|>\n\nHi. How can I help?<|eot_id|>"
                "<|start_header_id|>user<|end_header_id|>\n\nCount to 3.<|eot_id|>"
                "<|start_header_id|>assistant<|end_header_id|>\n\n");
  // A caller-supplied date_string replaces the default.
  auto t = ChatTemplate::Parse(Fixture("llama3"));
  ASSERT_TRUE(t.ok()) << t.status();
  auto out = t->Render(kUserOnly, false, "<s>", "</s>", {{"date_string", "8 Dec 2026"}});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_NE(out->find("Today Date: 8 Dec 2026\n\n<|eot_id|>"), std::string::npos) << *out;
  auto bad = t->Render({kUser1, {"tool", "x"}}, false, "<s>", "</s>");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(), "Unexpected role 'tool'");
}

TEST(ChatTemplateFixtures, ChatMl) {
  EXPECT_EQ(MustRender("chatml", kUserOnly, true),
            "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
            "<|im_start|>user\n Hello! <|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(MustRender("chatml", kMulti, false),
            "<|im_start|>system\nYou are terse. <|im_end|>\n<|im_start|>user\n Hello! <|im_end|>\n"
            "<|im_start|>assistant\nHi. How can I help?<|im_end|>\n"
            "<|im_start|>user\nCount to 3.<|im_end|>\n");
  EXPECT_EQ(MustRender("chatml", kSysUser, true),
            "<|im_start|>system\nYou are terse. <|im_end|>\n<|im_start|>user\n Hello! <|im_end|>\n"
            "<|im_start|>assistant\n");
}

TEST(ChatTemplateFixtures, Mistral) {
  EXPECT_EQ(MustRender("mistral", kUserOnly, true), "<s>[INST]  Hello!  [/INST]");
  EXPECT_EQ(MustRender("mistral", kMultiNoSystem, false),
            "<s>[INST]  Hello!  [/INST]Hi. How can I help?</s>[INST] Count to 3. [/INST]");
  ExpectRaises("mistral", kSysUser, kAlternate);
  ExpectRaises("mistral", kTwoUsers, kAlternate);
}

TEST(ChatTemplateFixtures, Llama2) {
  EXPECT_EQ(MustRender("llama2", kMulti, true),
            "<s>[INST] <<SYS>>\nYou are terse. \n<</SYS>>\n\n Hello! [/INST] Hi. How can I help? "
            "</s><s>[INST] Count to 3. [/INST]");
  EXPECT_EQ(MustRender("llama2", kUserOnly, false), "<s>[INST] Hello! [/INST]");
  ExpectRaises("llama2", kTwoUsers, kAlternate);
}

TEST(ChatTemplateFixtures, Gemma) {
  EXPECT_EQ(MustRender("gemma", kSysUser, false),
            "<s><start_of_turn>user\nYou are terse.\n\nHello!<end_of_turn>\n");
  EXPECT_EQ(MustRender("gemma", kMulti, true),
            "<s><start_of_turn>user\nYou are terse.\n\nHello!<end_of_turn>\n"
            "<start_of_turn>model\nHi. How can I help?<end_of_turn>\n"
            "<start_of_turn>user\nCount to 3.<end_of_turn>\n<start_of_turn>model\n");
  ExpectRaises("gemma", kTwoUsers, kAlternate);
}

TEST(ChatTemplateFixtures, Zephyr) {
  // Zephyr's template ends lines with {{ ... }}, whose newline trim_blocks keeps.
  EXPECT_EQ(MustRender("zephyr", kMulti, true),
            "<|system|>\nYou are terse. </s>\n<|user|>\n Hello! </s>\n"
            "<|assistant|>\nHi. How can I help?</s>\n<|user|>\nCount to 3.</s>\n<|assistant|>\n");
  EXPECT_EQ(MustRender("zephyr", kUserOnly, false), "<|user|>\n Hello! </s>\n");
}

// The conversation the snippets see.
const Messages kMessages = {
    {"system", "Be brief."}, {"user", " Hi there "}, {"assistant", "Hello!"}};
const std::vector<std::pair<std::string, std::string>> kExtra = {{"date_string", "8 Dec 2026"},
                                                                 {"unk_token", "<unk>"}};

struct Case {
  const char* tmpl;
  const char* expected;  // the output, or what the error message must contain
};

// clang-format off
// Feature snippets and what Python jinja2 (render_jinja.py) renders for them with kMessages.
const Case kSnippets[] = {
    {R"j({{ [1, 2, 1].count(1) }}{{ [1, 2].index(2) }}{{ messages[1:][0].role }}{{ (1, 2) == [1, 2] }}{{ 0|safe is string }})j",
     "21userFalseTrue"},
    {R"j({{ 'a' ~ "b" ~ 'c\'d' ~ "e\"f" ~ '\n\t\\' }})j",
     "abc'de\"f\n\t\\"},
    {R"j({{ 42 }} {{ -7 }} {{ 1.5 }} {{ 1.0 }} {{ 2.5e3 }} {{ 1e16 }} {{ 1e-5 }} {{ 0.1 + 0.2 }} {{ 1_000 }} {{ 123456789.125 }})j",
     "42 -7 1.5 1.0 2500.0 1e+16 1e-05 0.30000000000000004 1000 123456789.125"},
    {R"j({{ true }} {{ False }} {{ none }} {{ None }} {{ True }})j",
     "True False None None True"},
    {R"j({{ [1, 'a', none, true, 2.0] }} {{ {'k': 'v', 'n': [1, {'x': none}]} }} {{ (1, 2)|list }} {{ [] }} {{ {} }})j",
     "[1, 'a', None, True, 2.0] {'k': 'v', 'n': [1, {'x': None}]} [1, 2] [] {}"},
    {R"j({{ ['it\'s', "say \"hi\"", 'both \' and "', 'nl\n', 'é'] }})j",
     "[\"it's\", 'say \"hi\"', 'both \\' and \"', 'nl\\n', 'é']"},
    {R"j({{ 7 + 3 }} {{ 7 - 10 }} {{ 7 * 3 }} {{ 7 / 2 }} {{ 6 / 3 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 7 % -3 }} {{ 2 ** 10 }} {{ 2 ** -1 }} {{ 7.5 // 2 }} {{ -7.5 % 2 }} {{ true + 1 }} {{ 1 + 2 * 3 - 4 }} {{ (1 + 2) * 3 }} {{ -2 ** 2 }} {{ 2 * -1 }})j",
     "10 -3 21 3.5 2.0 3 -4 1 2 -2 1024 0.5 3.0 0.5 2 3 9 4 -2"},
    {R"j({{ 'ab' * 3 }}{{ 3 * 'ab' }}{{ [1] * 2 }}{{ [1, 2] + [3] }}{{ 'x' + 'y' }}{{ 1 ~ 2 ~ none ~ true }}{{ 'a' * 0 }})j",
     "abababababab[1, 1][1, 2, 3]xy12NoneTrue"},
    {R"j({{ 1 == 1.0 }} {{ 1 != 2 }} {{ 'a' < 'b' }} {{ 2 >= 2 }} {{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }} {{ [1, 2] < [1, 3] }} {{ 'b' in 'abc' }} {{ 2 in [1, 2] }} {{ 'k' in {'k': 1} }} {{ 'z' not in 'abc' }} {{ none == none }} {{ [1, [2]] == [1, [2]] }} {{ {'a': 1} == {'a': 1.0} }} {{ 'a' == 1 }} {{ true == 1 }})j",
     "True True True True True False True True True True True True True True False True"},
    {R"j({{ 0 or 'x' }} {{ '' and 'y' }} {{ 'a' and 'b' }} {{ not 0 }} {{ none or none }} {{ not 'a' == 'b' }} {{ [] or [1] }} {{ 1 and 0 or 5 }})j",
     "x  b True None True [1] 5"},
    {R"j({{ 'y' if 1 else 'n' }}{{ 'y' if 0 else 'n' }}[{{ 'y' if 0 }}]{{ 'a' if false else 'b' if true else 'c' }}{{ ('p' if true else 'q')|upper }})j",
     "yn[]bP"},
    {R"j({{ messages[0].role }} {{ messages[-1]['content'] }} {{ messages[1:]|length }} {{ messages[::-1][0].role }} {{ 'hello'[1:3] }} {{ 'hello'[::-1] }} {{ 'hello'[-1] }} {{ [1,2,3,4,5][1:4:2] }} {{ [1,2,3][5:] }} {{ 'héllo'[1] }} {{ [1,2,3][-2:] }} {{ [1,2,3][:-1] }} {{ 'abc'[5:1:-1] }} {{ messages.0.role }})j",
     "system Hello! 2 assistant el olleh o [2, 4] [] é [2, 3] [1, 2] c system"},
    {R"j([{{ foo }}][{{ foo is defined }}][{{ foo is not defined }}][{{ messages[0].nope is defined }}][{{ messages[10] is defined }}][{{ foo|default('dflt') }}][{{ ''|default('e', true) }}][{{ foo|length }}][{{ foo|d('x') }}][{{ foo == foo }}][{{ 'a' in foo }}][{{ foo|list }}][{{ foo|join(',') }}][{{ foo|trim }}][{{ foo ~ 'x' }}][{% for x in foo %}no{% else %}none{% endfor %}][{{ none|default('n') }}][{{ messages[0].nope|default('m') }}])j",
     "[][False][True][False][False][dflt][e][0][x][True][False][[]][][][x][none][None][m]"},
    {R"j({{ none is none }} {{ 'a' is string }} {{ {} is mapping }} {{ [] is iterable }} {{ 'a' is iterable }} {{ 1 is iterable }} {{ 1 is number }} {{ 1.5 is number }} {{ true is number }} {{ [] is sequence }} {{ 1 is sequence }} {{ true is true }} {{ 1 is true }} {{ false is false }} {{ 1 is integer }} {{ true is integer }} {{ 1.0 is float }} {{ true is boolean }} {{ 3 is odd }} {{ 4 is even }} {{ 9 is divisibleby 3 }} {{ 9 is divisibleby(2) }} {{ 'a' is eq 'a' }} {{ 2 is gt 1 }} {{ 2 is lt 1 }} {{ 'ab' is lower }} {{ 'AB' is upper }} {{ foo is undefined }} {{ 1 is in [1, 2] }} {{ none is sameas none }} {{ 'x' is not string }})j",
     "True True True True True False True True True True False True False True True False True True True True True False True True False True True True True True False"},
    {R"j({{ '  pad  '|trim }}|{{ 'xxhixx'|trim('x') }}|{{ 'Hello'|upper }}|{{ 'Hello'|lower }}|{{ 'hELLO wORLD'|capitalize }}|{{ 'hello big-world (x) 1st'|title }}|{{ 'a-b-c'|replace('-', '+') }}|{{ 'aaa'|replace('a', 'b', 2) }}|{{ 'ab'|replace('', '.') }}|{{ 42|string }}|{{ 'héllo'|length }}|{{ [1,2,3]|count }}|{{ {'a': 1}|length }}|{{ none|string }}|{{ ' \t\n x\u3000'|trim }}|{{ 'abc'|safe }})j",
     "pad|hi|HELLO|hello|Hello world|Hello Big-World (X) 1st|a+b+c|bba|.a.b.|42|5|3|1|None|x|abc"},
    {R"j({{ '42'|int }} {{ '3.7'|int }} {{ 'x'|int }} {{ 'x'|int(5) }} {{ 3.9|int }} {{ -3.9|int }} {{ '2.5'|float }} {{ 2|float }} {{ -3|abs }} {{ -2.5|abs }} {{ true|int }} {{ ' 7 '|int }} {{ '1e3'|int }} {{ none|int }} {{ 'x'|float }})j",
     "42 3 0 5 3 -3 2.5 2.0 3 2.5 1 7 1000 0 0.0"},
    {R"j({{ [3,1,2]|first }} {{ [3,1,2]|last }} {{ 'abc'|list }} {{ {'a': 1, 'b': 2}|list }} {{ [1,2]|join(', ') }} {{ ['a','b']|join }} {{ [1,'A',1,'a','b']|unique|list }} {{ ['A','a']|unique(true)|list }} {{ [1,2,3]|reverse|list }} {{ 'abc'|reverse }} {{ []|first is defined }} {{ 'xyz'|first }} {{ 'xyz'|last }} {{ messages|join(',', attribute='role') }})j",
     "3 2 ['a', 'b', 'c'] ['a', 'b'] 1, 2 ab [1, 'A', 'b'] ['A', 'a'] [3, 2, 1] cba False x z system,user,assistant"},
    {R"j({% set d = {'b': 1, 'a': 2} %}{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}{{ d.keys()|list }}{{ d.values()|list }}{{ d.get('a') }}{{ d.get('z') }}{{ d.get('z', 'none') }}{{ d|items|list }}{{ d['a'] }}{{ d.a }}{% for k, v in d|items %}{{ k }}{{ v }}{% endfor %}{{ d.items()|list }}{{ dict(x=1, y='z') }})j",
     "b=1;a=2;['b', 'a'][1, 2]2Nonenone[('b', 1), ('a', 2)]22b1a2[('b', 1), ('a', 2)]{'x': 1, 'y': 'z'}"},
    {R"j({{ messages|selectattr('role', 'equalto', 'user')|map(attribute='content')|list }} {{ messages|rejectattr('role', 'equalto', 'user')|map(attribute='role')|join(',') }} {{ messages|map(attribute='role')|list }} {{ [{'a': 1}, {}]|selectattr('a', 'defined')|list }} {{ [{'a': 1}, {'a': 0}]|selectattr('a')|list }} {{ [1, 0, 2]|select|list }} {{ [1,2,3,4]|select('odd')|list }} {{ [1,2,3]|reject('even')|list }} {{ ['a ', ' b']|map('trim')|list }} {{ [{'a': 1}, {}]|map(attribute='a', default=9)|list }} {{ messages|selectattr('role', '==', 'system')|list|length }} {{ [{'a': {'b': 5}}]|map(attribute='a.b')|list }} {{ [[1, 2], [3, 4]]|map(attribute='1')|list }} {{ [1, 5, 3]|select('gt', 2)|list }} {{ ['x', 'y']|map('upper')|join }})j",
     "[' Hi there '] system,assistant ['system', 'user', 'assistant'] [{'a': 1}] [{'a': 1}] [1, 2] [1, 3] [1, 3] ['a', 'b'] [1, 9] 1 [5] [2, 4] [5, 3] XY"},
    {R"j({{ {'a': 'x<y>&\'', 'b': [1, 2.5, true, none], 'c': 'é\n\u0001"\\'}|tojson }}|{{ [1, {'k': []}, {}]|tojson(indent=2) }}|{{ 'x'|tojson }}|{{ {'b': 1, 'a': 2}|tojson(sort_keys=true) }}|{{ {}|tojson }}|{{ []|tojson(indent=2) }}|{{ messages[0]|tojson }}|{{ 1.0|tojson }}|{{ 'é'|tojson(ensure_ascii=true) }}|{{ {'a': [1]}|tojson(indent='\t') }}|{{ {'a': 1, 'b': 2}|tojson(separators=(',', ':')) }})j",
     "{\"a\": \"x<y>&'\", \"b\": [1, 2.5, true, null], \"c\": \"é\\n\\u0001\\\"\\\\\"}|[\n  1,\n  {\n    \"k\": []\n  },\n  {}\n]|\"x\"|{\"a\": 2, \"b\": 1}|{}|[]|{\"role\": \"system\", \"content\": \"Be brief.\"}|1.0|\"\\u00e9\"|{\n\t\"a\": [\n\t\t1\n\t]\n}|{\"a\":1,\"b\":2}"},
    {R"j({{ '  x  '.strip() }}|{{ 'xxhixx'.strip('x') }}|{{ '  x  '.lstrip() }}|{{ '  x  '.rstrip() }}|{{ 'hello'.startswith('he') }}|{{ 'hello'.endswith(('lo', 'x')) }}|{{ 'a,b,,c'.split(',') }}|{{ ' a  b '.split() }}|{{ 'a b c'.split(' ', 1) }}|{{ 'a b  c '.split(none, 1) }}|{{ 'Hi'.upper() }}|{{ 'Hi'.lower() }}|{{ 'a-b-b'.replace('-', '_') }}|{{ 'a-b-b'.replace('-', '_', 1) }}|{{ 'hello world 1st'.title() }}|{{ 'héllo'.find('l') }}|{{ 'hello'.find('z') }}|{{ 'hello'.count('l') }}|{{ '-'.join(['a', 'b']) }}|{{ 'a\nb\r\nc\n'.splitlines() }}|{{ 'hELLO'.capitalize() }}|{{ '12'.isdigit() }}|{{ 'ab1'.isalpha() }}|{{ 'xax'.rstrip('x') }})j",
     "x|hi|x  |  x|True|True|['a', 'b', '', 'c']|['a', 'b']|['a', 'b c']|['a', 'b  c ']|HI|hi|a_b_b|a_b-b|Hello World 1St|2|-1|2|a-b|['a', 'b', 'c']|Hello|True|False|xa"},
    {R"j({% for m in messages %}{{ loop.index }}{{ loop.index0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.previtem.role if loop.previtem is defined else '-' }}{{ loop.nextitem.role if loop.nextitem is defined else '-' }};{% endfor %})j",
     "10TrueFalse332-user;21FalseFalse321systemassistant;32FalseTrue310user-;"},
    {R"j({% for x in [] %}no{% else %}empty{% endfor %}|{% for x in [1,2,3,4] if x is even %}{{ x }}{{ loop.length }}{{ loop.cycle('a','b') }}{% endfor %}|{% for a, b in [[1, 2], [3, 4]] %}{{ a + b }}{% endfor %}|{% for c in 'hé' %}[{{ c }}]{% endfor %}|{% for k in {'x': 1, 'y': 2} %}{{ k }}{% endfor %}|{% for i in [1, 2] %}{% for j in [1, 2] %}{{ i }}{{ j }}{{ loop.index }}{% endfor %}{{ loop.index }};{% endfor %}|{% for (a, b) in [('p', 'q')] %}{{ a }}{{ b }}{% endfor %})j",
     "empty|22a42b|37|[h][é]|xy|1111221;2112222;|pq"},
    {R"j({% for i in range(10) %}{% if i == 2 %}{% continue %}{% endif %}{% if i > 4 %}{% break %}{% endif %}{{ i }}{% endfor %}{{ range(3)|list }}{{ range(1, 10, 3)|list }}{{ range(5, 0, -2)|list }}{{ range(0)|list }}{% for i in range(3) %}{% for j in range(3) %}{% if j == 1 %}{% break %}{% endif %}{{ i }}{{ j }}{% endfor %}{% endfor %})j",
     "0134[0, 1, 2][1, 4, 7][5, 3, 1][]001020"},
    {R"j({% set x = 1 %}{% for i in [1, 2] %}{{ x }}{% set x = x + 10 %}{{ x }},{% endfor %}{{ x }}|{% set ns = namespace(total=0, found=false) %}{% for i in [1, 2, 3] %}{% set ns.total = ns.total + i %}{% if i == 2 %}{% set ns.found = true %}{% endif %}{% endfor %}{{ ns.total }}{{ ns.found }}|{% if true %}{% set y = 'if-set' %}{% endif %}{{ y }}|{% set messages = messages[1:] %}{{ messages|length }}|{% set n2 = namespace({'a': 1}, b=2) %}{{ n2.a }}{{ n2.b }}{{ n2.c is defined }})j",
     "111,111,1|6True|if-set|2|12False"},
    {R"j({% macro render(m, prefix='>') %}{{ prefix }}{{ m.role }}:{{ m.content|trim }}{% endmacro %}{% for m in messages %}{{ render(m) }}{{ render(m, prefix='#') }}{{ render(m, '!') }}{% endfor %}{% macro noargs() %}[{{ bos_token }}]{% endmacro %}{{ noargs() }}{% macro opt(a, b) %}{{ a }}{{ b is defined }}{% endmacro %}{{ opt(1) }}{{ noargs()|length }})j",
     ">system:Be brief.#system:Be brief.!system:Be brief.>user:Hi there#user:Hi there!user:Hi there>assistant:Hello!#assistant:Hello!!assistant:Hello![<s>]1False5"},
    {R"j({% set body %}{{ messages|length }} msgs{% endset %}[{{ body }}]{% set a, b = 1, 2 %}{{ a }}{{ b }}{% set t = (1, 2) %}{{ t|length }}{% set s = 'x', %}{{ s|length }})j",
     "[3 msgs]1221"},
    {R"j(a
  {% if true %}
    b
  {% endif %}
c
  {{ 'd' }}  {% if true %}e{% endif %}
{%- if true -%}
  f  
{%- endif %}
{# comment #}
  {#- c2 -#}  g {%+ if true %}h{% endif %}{% raw %}{{ not parsed }} {% if %}{% endraw %}
	{% if true %}tab{% endif %}
{% if true +%}
keep{% endif %}
  {%- raw -%}  r  {%- endraw %}
x{{- ' y ' -}}  z{# - #})j",
     "a\n    b\nc\n  d  efg h{{ not parsed }} {% if %}tab\nkeeprx y z"},
    {R"j({{ '\u00e9\x41\101' }}{{ 'tab\there' }}{{ "\\d" }}{{ 'a' 'b' }}{{ '\d' }}{{ "multi
line" }})j",
     "éAAtab\there\\dab\\dmulti\nline"},
    {R"j({{ 'ÄÖ'|length }}{{ '日本語'[1] }}{{ '  日本  '|trim }}{{ ' x\u3000'|trim }}|{{ 'ÀB'|lower }})j",
     "2本日本x|àb"},
    {R"j({{ 'a\nb\n\nc'|indent(2) }}|{{ 'a\nb'|indent(2, true) }}|{{ 'a\n\nb'|indent(2, blank=true) }}|{{ 'a\nb'|indent('> ') }})j",
     "a\n  b\n\n  c|  a\n  b|a\n  \n  b|a\n> b"},
    {R"j({{ '<a href="x">&\''|e }}{{ '<b>'|escape }})j",
     "&lt;a href=&#34;x&#34;&gt;&amp;&#39;&lt;b&gt;"},
    {R"j({{ messages|tojson }}|{{ messages|length }})j",
     "[{\"role\": \"system\", \"content\": \"Be brief.\"}, {\"role\": \"user\", \"content\": \" Hi there \"}, {\"role\": \"assistant\", \"content\": \"Hello!\"}]|3"},
};

// Snippets that fail at render time in jinja2 too: what Saturn's error must contain.
const Case kRuntimeErrors[] = {
    {R"j({{ (messages and 7)[:1] }})j", "TypeError: 'int' object is not subscriptable"},
    {R"j({{ messages[0][1:] }})j", "TypeError: unhashable type: 'slice'"},
    {R"j({{ [1, 2].index(3) }})j", "ValueError: 3 is not in list"},
    {R"j({{ foo.bar }})j", "'foo' is undefined"},
    {R"j({{ 1 + 'a' }})j", "TypeError: unsupported operand type(s) for +: 'int' and 'str'"},
    {R"j({{ 'a' + 1 }})j", "TypeError: can only concatenate str (not \"int\") to str"},
    {R"j({{ 1 < 'a' }})j", "TypeError: '<' not supported between instances of 'int' and 'str'"},
    {R"j({{ 1 / 0 }})j", "ZeroDivisionError: division by zero"},
    {R"j({{ 1 // 0 }})j", "ZeroDivisionError: integer division or modulo by zero"},
    {R"j({{ foo() }})j", "'foo' is undefined"},
    {R"j({{ 5() }})j", "TypeError: 'int' object is not callable"},
    {R"j({{ foo + 1 }})j", "'foo' is undefined"},
    {R"j({{ range(100001)|length }})j", "range() of more than 100000 items"},
    {R"j({{ raise_exception('boom: ' ~ messages|length) }})j", "boom: 3"},
    {R"j({{ foo|tojson }})j", "TypeError: Object of type Undefined is not JSON serializable"},
    {R"j({% set x = 5 %}{% set x.a = 1 %})j", "cannot assign attribute on non-namespace object"},
    {R"j({{ foo[0] }})j", "'foo' is undefined"},
    {R"j({{ [1, 2]|int }}{% for a, b in [[1, 2, 3]] %}{% endfor %})j", "ValueError: too many values to unpack (expected 2)"},
    {R"j({% for a, b in [[1]] %}{% endfor %})j", "ValueError: not enough values to unpack (expected 2, got 1)"},
    {R"j({{ 'abc'.nope() }})j", "'str object' has no attribute 'nope'"},
    {R"j({{ none|length }})j", "TypeError: object of type 'NoneType' has no len()"},
    {R"j({% macro m(a) %}{% endmacro %}{{ m(1, 2) }})j", "TypeError: macro 'm' takes not more than 1 argument(s)"},
    {R"j({{ foo|int }})j", "'foo' is undefined"},
    {R"j({{ -'a' }})j", "TypeError: bad operand type for unary -: 'str'"},
    {R"j({{ 'a' in 1 }})j", "TypeError: argument of type 'int' is not iterable"},
    {R"j({{ 1 in 'a' }})j", "TypeError: 'in <string>' requires string as left operand, not int"},
};
// clang-format on

absl::StatusOr<std::string> RenderSnippet(const std::string& tmpl) {
  auto t = ChatTemplate::Parse(tmpl);
  if (!t.ok()) return t.status();
  return t->Render(kMessages, true, "<s>", "</s>", kExtra);
}

TEST(ChatTemplateSnippets, RenderAsJinja2Does) {
  for (const Case& c : kSnippets) {
    auto out = RenderSnippet(c.tmpl);
    ASSERT_TRUE(out.ok()) << c.tmpl << "\n" << out.status();
    EXPECT_EQ(*out, c.expected) << c.tmpl;
  }
}

TEST(ChatTemplateSnippets, RuntimeErrorsSayWhatFailed) {
  for (const Case& c : kRuntimeErrors) {
    auto out = RenderSnippet(c.tmpl);
    ASSERT_FALSE(out.ok()) << c.tmpl << " rendered " << *out;
    EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument) << c.tmpl;
    EXPECT_NE(std::string(out.status().message()).find(c.expected), std::string::npos)
        << c.tmpl << "\n"
        << out.status();
  }
}

TEST(ChatTemplateSnippets, RaiseExceptionIsTheWholeMessage) {
  auto out =
      RenderSnippet("{% if messages|length > 2 %}{{ raise_exception('too many') }}{% endif %}");
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(out.status().message(), "too many");
}

TEST(ChatTemplateSnippets, RuntimeErrorsNameLineAndColumn) {
  auto out = RenderSnippet("line one\n{{ 1 }}{{ foo.bar }}");
  ASSERT_FALSE(out.ok());
  // The column is the '.' of the attribute lookup that needed foo.
  EXPECT_EQ(out.status().message(), "chat_template line 2, column 14: 'foo' is undefined");
}

TEST(ChatTemplateSnippets, GenerationBlockRendersItsBody) {
  // transformers' AssistantTracker tag, which plain jinja2 does not know.
  auto out = RenderSnippet(
      "{% for m in messages %}{% generation %}[{{ m.role }}]{% endgeneration %}{% endfor %}");
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(*out, "[system][user][assistant]");
}

TEST(ChatTemplateSnippets, NewlinesAreNormalizedAndOneTrailingNewlineDropped) {
  auto out = RenderSnippet("a\r\nb\rc{% if true %}\r\nd{% endif %}x\n\n");
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(*out, "a\nb\ncdx\n");
}

TEST(ChatTemplateSnippets, ParsedTemplateIsReusable) {
  auto t = ChatTemplate::Parse("{% for m in messages %}{{ m.content }};{% endfor %}");
  ASSERT_TRUE(t.ok()) << t.status();
  const ChatTemplate copy = *t;
  EXPECT_EQ(*t->Render({{"user", "a"}}, false, "", ""), "a;");
  EXPECT_EQ(*copy.Render({{"user", "b"}, {"assistant", "c"}}, false, "", ""), "b;c;");
}

TEST(ChatTemplateErrors, ParseErrorsNameLineAndColumn) {
  const Case cases[] = {
      {"ab\n{{ x", "chat_template line 2, column 1: unterminated tag: '{{' is never closed"},
      {"{% if x %}\nyes", "chat_template line 1, column 4: this block is never closed"},
      {"{% for x in y %}{% endif %}{% endfor %}", "line 1, column 20: unexpected '{% endif %}'"},
      {"text {% endfor %}", "line 1, column 9: unexpected '{% endfor %}'"},
      {"{{ x }}\n  {{ x|foo }}", "chat_template line 2, column 8: filter 'foo' is not supported"},
      {"{{ x is frob }}", "line 1, column 9: test 'frob' is not supported"},
      {"{% include 'other.jinja' %}", "line 1, column 4: statement 'include' is not supported"},
      {"{{ 'abc }}", "line 1, column 4: unterminated string literal"},
      {"{# never closed", "line 1, column 1: unterminated comment"},
      {"{{ x + }}", "line 1, column 8: expected an expression, found '}}'"},
      {"{{ ) }}", "line 1, column 4: unexpected ')'"},
      {"{% break %}", "line 1, column 4: 'break' outside a for loop"},
      {"{% for x in y recursive %}{% endfor %}", "recursive for loops are not supported"},
      {"{{ x ! y }}", "line 1, column 6: unexpected character '!'"},
      {"{% raw %}never ended", "unterminated raw block"},
      {"{% set x = 1 + %}", "expected an expression"},
      {"{{ f(a=1, 2) }}", "a positional argument follows a keyword argument"},
      {"{{ 99999999999999999999 }}", "integer literal is too large"},
  };
  for (const Case& c : cases) {
    auto t = ChatTemplate::Parse(c.tmpl);
    ASSERT_FALSE(t.ok()) << c.tmpl;
    EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument) << c.tmpl;
    EXPECT_NE(std::string(t.status().message()).find(c.expected), std::string::npos)
        << c.tmpl << "\n"
        << t.status();
  }
}

std::string Repeat(const std::string& s, int n) {
  std::string out;
  for (int i = 0; i < n; ++i) out += s;
  return out;
}

// Templates that would exhaust the stack, the CPU or memory must each stop with a clear error.
TEST(ChatTemplateErrors, BoundsHoldOnHostileInput) {
  const std::pair<std::string, std::string> parse_cases[] = {
      {"{{ " + Repeat("(", 10000) + "1" + Repeat(")", 10000) + " }}", "nested too deeply"},
      {"{{ " + Repeat("[", 10000) + " }}", "nested too deeply"},
      {Repeat("{% if true %}", 10000), "nested too deeply"},
      {"{{ 1" + Repeat(" + 1", 10000) + " }}", "nested too deeply"},
      {"{{ " + Repeat("not ", 10000) + "x }}", "nested too deeply"},
      {"{{ " + Repeat("-", 10000) + "1 }}", "nested too deeply"},
      {"{{ x" + Repeat("|trim", 10000) + " }}", "nested too deeply"},
      {std::string(ChatTemplate::kMaxSourceBytes + 1, 'x'), "at most 1048576 are accepted"},
  };
  for (const auto& [tmpl, msg] : parse_cases) {
    auto t = ChatTemplate::Parse(tmpl);
    ASSERT_FALSE(t.ok()) << tmpl.substr(0, 40);
    EXPECT_NE(std::string(t.status().message()).find(msg), std::string::npos) << t.status();
  }
  const std::pair<std::string, std::string> render_cases[] = {
      {"{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
       "loops ran more than 1000000 iterations"},
      {"{% set ns = namespace(s='xx') %}{% for i in range(64) %}{% set ns.s = ns.s + ns.s %}"
       "{% endfor %}",
       "a string exceeds 4194304 bytes"},
      {"{% for i in range(100000) %}{{ 'x' * 1000 }}{% endfor %}", "the output exceeds"},
      {"{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}", "macros call each other too deeply"},
      {"{% set ns = namespace(x=[]) %}{% for i in range(1000) %}{% set ns.x = [ns.x] %}"
       "{% endfor %}{{ ns.x }}",
       "lists and dicts are nested too deeply"},
      {"{{ 'x' * 100000000 }}", "repetition result is too large"},
      {"{% set big = 'x' * 4000000 %}{{ [big] * 1000000 }}", "the output exceeds"},
      {"{% set big = 'x' * 4000000 %}{{ ([big] * 1000000)|tojson }}", "tojson output exceeds"},
      {"{% set a = [range(100000)|list] * 1000000 %}{% set b = [range(100000)|list] * 1000000 %}"
       "{{ a == b }}",
       "too much work"},
      {"{{ range(10**9)|length }}", "range() of more than 100000 items"},
      {"{{ 2 ** 70 }}", "integer overflow"},
      {"{% for i in range(100000) %}{% for j in range(9) %}{% set x = [" + Repeat("1, ", 30) +
           "] %}{% endfor %}{% endfor %}",
       "too much work"},
  };
  for (const auto& [tmpl, msg] : render_cases) {
    auto t = ChatTemplate::Parse(tmpl);
    ASSERT_TRUE(t.ok()) << tmpl << "\n" << t.status();
    const auto start = std::chrono::steady_clock::now();
    auto out = t->Render(kMessages, true, "<s>", "</s>");
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    ASSERT_FALSE(out.ok()) << tmpl;
    EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(std::string(out.status().message()).find(msg), std::string::npos) << tmpl << "\n"
                                                                                << out.status();
    EXPECT_LT(seconds, 30) << tmpl;
  }
}

// Random edits of the fixtures: each must parse or fail cleanly, and render or fail cleanly.
TEST(ChatTemplateErrors, MutatedTemplatesNeverCrash) {
  const std::string pieces[] = {"{{",     "}}",   "{%",    "%}", "{#",   "#}",   "-",   "(",
                                ")",      "[",    "]",     "'",  "\"",   "|",    ".",   "for ",
                                "endfor", "if ",  "endif", "\\", " in ", "loop", "ns.", "\n",
                                "\xff",   "\xc3", "raw",   "*",  ","};
  std::mt19937 rng(1234);
  int parsed = 0;
  for (const char* name : {"llama3", "chatml", "mistral", "llama2", "gemma", "zephyr"}) {
    const std::string base = Fixture(name);
    for (int iter = 0; iter < 300; ++iter) {
      std::string s = base;
      const int edits = 1 + rng() % 4;
      for (int e = 0; e < edits && !s.empty(); ++e) {
        const size_t at = rng() % s.size();
        switch (rng() % 3) {
          case 0:
            s.erase(at, 1 + rng() % 8);
            break;
          case 1:
            s.insert(at, pieces[rng() % std::size(pieces)]);
            break;
          default:
            s[at] = static_cast<char>(rng() % 256);
            break;
        }
      }
      auto t = ChatTemplate::Parse(s);
      if (!t.ok()) {
        EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
        continue;
      }
      ++parsed;
      auto out = t->Render(kMulti, true, "<s>", "</s>");
      if (!out.ok()) {
        EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument);
      }
    }
  }
  EXPECT_GT(parsed, 0);
}

// Runs render_jinja.py over `cases`; nullopt (with *why) when jinja2 cannot be imported.
std::optional<nlohmann::ordered_json> RenderWithJinja2(const nlohmann::ordered_json& cases,
                                                       std::string* why) {
  std::string python = "python3";
#ifdef SATURN_BINARY_DIR
  const std::string venv = std::string(SATURN_BINARY_DIR) + "/pyenv/bin/python3";
  if (access(venv.c_str(), X_OK) == 0) python = venv;
#endif
  if (std::system((python + " -c 'import jinja2' > /dev/null 2>&1").c_str()) != 0) {
    *why = "Python jinja2 is not importable by " + python + ", so there is nothing to compare with";
    return std::nullopt;
  }
  char dir_template[] = "/tmp/chat_template_test.XXXXXX";
  const char* dir = mkdtemp(dir_template);
  if (!dir) {
    *why = "cannot make a temporary directory";
    return std::nullopt;
  }
  const std::string in = std::string(dir) + "/cases.json", out = std::string(dir) + "/results.json";
  std::ofstream(in) << cases.dump();
  const std::string cmd = python + " " + SATURN_SOURCE_DIR +
                          "/tests/engine/tokenizer/render_jinja.py " + in + " " + out;
  const int rc = std::system(cmd.c_str());
  nlohmann::ordered_json results = nlohmann::ordered_json::parse(ReadFile(out), nullptr, false);
  std::remove(in.c_str());
  std::remove(out.c_str());
  rmdir(dir);
  EXPECT_EQ(rc, 0) << cmd;
  return results;
}

nlohmann::ordered_json JsonCase(const std::string& tmpl, const Messages& messages, bool gen) {
  nlohmann::ordered_json m = nlohmann::ordered_json::array();
  for (const ChatMessage& x : messages) m.push_back({{"role", x.role}, {"content", x.content}});
  nlohmann::ordered_json extra = nlohmann::ordered_json::object();
  for (const auto& [k, v] : kExtra) extra[k] = v;
  return {{"template", tmpl},   {"messages", m},       {"add_generation_prompt", gen},
          {"bos_token", "<s>"}, {"eos_token", "</s>"}, {"extra", extra}};
}

TEST(ChatTemplateJinja2, ByteIdenticalToPythonJinja2) {
  struct Run {
    std::string tmpl;
    Messages messages;
    bool gen;
  };
  std::vector<Run> runs;
  for (const char* name : {"llama3", "chatml", "mistral", "llama2", "gemma", "zephyr"}) {
    for (const Messages* m : {&kSysUser, &kUserOnly, &kMulti, &kMultiNoSystem, &kTwoUsers}) {
      for (bool gen : {false, true}) runs.push_back({Fixture(name), *m, gen});
    }
  }
  for (const Case& c : kSnippets) runs.push_back({c.tmpl, kMessages, true});
  for (const Case& c : kRuntimeErrors) runs.push_back({c.tmpl, kMessages, true});
  // Content with characters that escaping, trimming and repr must treat as Python does.
  const Messages tricky = {
      {"system", "Use \"quotes\", 'apostrophes' & <tags>\n\ttabs \\ "},
      {"user", "\xc3\xa9t\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac \xf0\x9f\x98\x80 \u00a0"}};
  for (const char* t :
       {"{{ messages|tojson }}", "{{ messages }}", "{{ messages|tojson(indent=2) }}",
        "{% for m in messages %}[{{ m.content|trim }}][{{ m.content.split() }}]{% endfor %}",
        "{% for m in messages %}{{ m.content|length }} {{ m.content|upper }}{% endfor %}"}) {
    runs.push_back({t, tricky, false});
  }
  nlohmann::ordered_json cases = nlohmann::ordered_json::array();
  for (const Run& r : runs) cases.push_back(JsonCase(r.tmpl, r.messages, r.gen));
  std::string why;
  const auto results = RenderWithJinja2(cases, &why);
  if (!results) GTEST_SKIP() << why;
  ASSERT_TRUE(results->is_array() && results->size() == runs.size()) << "render_jinja.py failed";
  int compared = 0;
  for (size_t k = 0; k < runs.size(); ++k) {
    const nlohmann::ordered_json& want = (*results)[k];
    auto t = ChatTemplate::Parse(runs[k].tmpl);
    absl::StatusOr<std::string> got =
        t.ok() ? t->Render(runs[k].messages, runs[k].gen, "<s>", "</s>", kExtra)
               : absl::StatusOr<std::string>(t.status());
    if (want["ok"].get<bool>()) {
      ASSERT_TRUE(got.ok()) << runs[k].tmpl << "\n" << got.status();
      EXPECT_EQ(*got, want["output"].get<std::string>()) << runs[k].tmpl;
    } else {
      ASSERT_FALSE(got.ok()) << runs[k].tmpl << "\njinja2: " << want["error"]
                             << "\nSaturn: " << *got;
      if (want["raised"].get<bool>()) {
        const std::string err = want["error"].get<std::string>();
        EXPECT_EQ("RaisedByTemplate: " + std::string(got.status().message()), err);
      }
    }
    ++compared;
  }
  EXPECT_EQ(compared, static_cast<int>(runs.size()));
}

}  // namespace
}  // namespace saturn
