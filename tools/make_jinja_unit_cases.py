#!/usr/bin/env python3
"""Jinja engine unit cases: small templates rendered by Jinja2 in the environment transformers
uses for chat templates (replica_env() of make_template_fixtures.py: ImmutableSandboxedEnvironment,
trim_blocks, lstrip_blocks, loopcontrols, transformers' tojson). Writes OUT.json with each
template, its context and Jinja2's output (or the error it raised).

Usage: make_jinja_unit_cases.py OUT.json   (needs only jinja2; no GPU, no transformers)
"""
import json
import os
import sys

import jinja2

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_template_fixtures import replica_env  # noqa: E402
env = replica_env()
C = []
def add(name, tpl, ctx=None):
    C.append((name, tpl, ctx or {}))

# whitespace control / trim_blocks / lstrip_blocks / comments / raw
add("ws_trim_lstrip", "a\n  {% if true %}\n  b\n  {% endif %}\nc\n")
add("ws_minus", "a  \n  {%- if true -%}  \n  b  \n  {%- endif -%}\n  c")
add("ws_var_minus", "x  {{- 'y' -}}  z")
add("ws_plus_keeps", "a\n  {%+ if true %}b{% endif +%}\nc")
add("ws_inline_tag_no_lstrip", "a {% if true %}b{% endif %} c")
add("comment", "a {# comment #} b\n  {# own line #}\nc {#- x -#} d")
add("raw", "{% raw %}{{ not evaluated }}{% if %}{% endraw %}!")
add("trailing_newline_dropped", "line\n")
add("crlf_normalized", "a\r\nb\rc")
add("var_no_trim_newline", "{{ 'a' }}\nb")
# printing
add("print_python", "{{ none }} {{ true }} {{ false }} {{ 1 }} {{ 1.0 }} {{ 0.1 }} {{ 1e20 }} {{ 1.5e-7 }} {{ 100000000000000000.0 }} {{ -0.0 }}")
add("print_containers", "{{ [1, 'a', none, true, 2.5] }} {{ {'k': 'v', 'n': [1]} }} {{ (1,) }} {{ (1, 'b') }} {{ () }} {{ [] }} {{ {} }}")
add("print_str_repr", "{{ [\"it's\", 'say \"hi\"', 'both \\' \"', 'tab\\t\\n', '\\x00\\x7f', 'é日🚀'] }}", {})
add("print_undefined", "[{{ nothing }}][{{ d.missing }}]", {"d": {}})
add("print_tuple_stmt", "{{ 1, 2 }}")
# arithmetic
add("arith", "{{ 7 // 2 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 7 % -3 }} {{ 2 ** 10 }} {{ 2 ** -1 }} {{ 7 / 2 }} {{ 6 / 2 }} {{ 7.5 // 2 }} {{ -2 ** 2 }} {{ 1 + 2 * 3 - 4 }}")
add("arith_mixed", "{{ 1 + 1.5 }} {{ true + 1 }} {{ 'ab' * 3 }} {{ 3 * 'x' }} {{ [1] * 2 }} {{ [1] + [2] }} {{ 'a' ~ 1 ~ none ~ undefined_var }}")
add("string_percent", "{{ '%s-%d-%05.2f' % ('a', 3, 2.5) }} {{ '%s' % 'x' }}")
add("compare", "{{ 1 < 2 < 3 }} {{ 1 < 3 < 2 }} {{ 1 == 1.0 }} {{ 'a' < 'b' }} {{ [1, 2] < [1, 3] }} {{ none == none }} {{ 1 != 2 }} {{ (1, 2) == [1, 2] }}")
add("logic", "{{ 0 or 'x' }} {{ 'a' and 'b' }} {{ '' and 'b' }} {{ not 0 }} {{ not none and 1 }}")
add("in_notin", "{{ 'a' in 'cat' }} {{ 2 in [1, 2] }} {{ 'k' in {'k': 1} }} {{ 'z' not in 'cat' }} {{ 3 not in [1] }}")
add("condexpr", "{{ 'y' if 1 else 'n' }}|{{ 'y' if 0 else 'n' }}|{{ 'y' if 0 }}|")
add("unary", "{{ -3|abs }} {{ -(3) }} {{ +4 }} {{ --2 }}")
# variables / set / namespace / scoping
add("set_basic", "{% set x = 3 %}{% set a, b = 1, 2 %}{{ x }}{{ a }}{{ b }}")
add("set_block", "{% set body %}Hello {{ name }}{% endset %}[{{ body }}]{% set up | upper %}abc{% endset %}{{ up }}", {"name": "Bob"})
add("scope_loop_no_leak", "{% set x = 1 %}{% for i in [1, 2] %}{% set x = i * 10 %}{{ x }},{% endfor %}{{ x }}")
add("scope_if_leaks", "{% if true %}{% set y = 5 %}{% endif %}{{ y }}")
add("namespace", "{% set ns = namespace(total=0, items='') %}{% for i in [1, 2, 3] %}{% set ns.total = ns.total + i %}{% endfor %}{{ ns.total }} {{ ns.items == '' }}")
add("namespace_from_dict", "{% set ns = namespace({'a': 1}, b=2) %}{{ ns.a }}{{ ns.b }}")
# loops
add("loop_vars", "{% for x in ['a', 'b', 'c'] %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }};{% endfor %}")
add("loop_prev_next", "{% for x in [1, 2, 3] %}[{{ loop.previtem }}|{{ loop.nextitem }}]{% endfor %}")
add("loop_cycle", "{% for x in range(5) %}{{ loop.cycle('a', 'b') }}{% endfor %}")
add("loop_else", "{% for x in [] %}x{% else %}empty{% endfor %}{% for x in [1] %}{{ x }}{% else %}empty{% endfor %}")
add("loop_filter", "{% for x in range(10) if x is odd %}{{ x }}{{ loop.length }},{% endfor %}")
add("loop_break_continue", "{% for x in range(10) %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 5 %}{% break %}{% endif %}{{ x }}{% endfor %}")
add("loop_dict_items", "{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}{% for k in d %}{{ k }}{% endfor %}", {"d": {"b": 1, "a": 2}})
add("loop_nested", "{% for a in [1, 2] %}{% for b in 'xy' %}{{ a }}{{ b }}{{ loop.index }}{% endfor %}/{{ loop.index }} {% endfor %}")
add("loop_string", "{% for c in 'héllo' %}{{ c }}.{% endfor %}")
add("loop_changed", "{% for x in [1, 1, 2, 2, 1] %}{% if loop.changed(x) %}{{ x }}{% endif %}{% endfor %}")
# macros / call
add("macro", "{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}{{ greet('A') }} {{ greet('B', '?') }} {{ greet(punct='.', name='C') }}")
add("macro_varargs_kwargs", "{% macro m(a) %}{{ a }}{{ varargs }}{{ kwargs }}{% endmacro %}{{ m(1, 2, 3, k=4) }}")
add("macro_missing_arg", "{% macro m(a, b) %}[{{ a }}|{{ b }}]{{ b is defined }}{% endmacro %}{{ m(1) }}")
add("call_block", "{% macro wrap(tag) %}<{{ tag }}>{{ caller() }}</{{ tag }}>{% endmacro %}{% call wrap('b') %}inner{% endcall %}")
add("call_block_args", "{% macro each(items) %}{% for i in items %}{{ caller(i) }}{% endfor %}{% endmacro %}{% call(x) each([1, 2]) %}<{{ x }}>{% endcall %}")
add("filter_block", "{% filter upper %}hello {{ 'world' }}{% endfilter %}{% filter trim | title %}  two words  {% endfilter %}")
add("with_block", "{% with a = 1, b = 'x' %}{{ a }}{{ b }}{% endwith %}[{{ a }}]")
# subscripts / slicing / attributes
add("slicing", "{{ s[1:3] }} {{ s[::-1] }} {{ s[-2:] }} {{ l[::2] }} {{ l[:-1] }} {{ l[5:] }} {{ l[::-2] }} {{ l[1:-1:1] }} {{ s[10:] }}|{{ t[1:] }}", {"s": "héllo", "l": [1, 2, 3, 4, 5], "t": [1, 2, 3]})
add("index", "{{ l[0] }} {{ l[-1] }} {{ l.0 }} {{ s[1] }} {{ d['k'] }} {{ d.k }} {{ l[9] }}|", {"l": [1, 2, 3], "s": "héllo", "d": {"k": "v"}})
add("dict_methods", "{{ d.keys() | list }} {{ d.values() | list }} {{ d.items() | list }} {{ d.get('a') }} {{ d.get('z') }} {{ d.get('z', 7) }}", {"d": {"a": 1, "b": [2]}})
add("dict_attr_vs_key", "{{ d.items is defined }} {{ d['items'] }} {{ d.other }}", {"d": {"items": 5, "other": 6}})
add("none_attr_is_undefined", "[{{ n.x }}]{{ n.x is defined }}", {"n": None})
# string methods
add("str_methods", "{{ s.upper() }} {{ s.lower() }} {{ s.title() }} {{ s.capitalize() }} {{ s.startswith('He') }} {{ s.endswith(('x', 'ld')) }} {{ s.find('o') }} {{ s.rfind('o') }} {{ s.count('l') }} {{ s.replace('l', 'L', 2) }}", {"s": "Hello wORLD"})
add("str_split_strip", "{{ s.split() }} {{ s.split(',') }} {{ s.split(',', 1) }} {{ s.rsplit(',', 1) }} [{{ s.strip() }}] [{{ s.lstrip() }}] [{{ s.rstrip() }}] [{{ 'xxaxx'.strip('x') }}]", {"s": "  a,b , c  "})
add("str_format", "{{ '{} and {}'.format(1, 'b') }} {{ '{0}{0}{name}'.format('x', name='y') }} {{ '{:>5}|{:<4}|{:^6}|{:.2f}'.format('a', 'b', 'c', 3.14159) }}")
add("str_misc", "{{ 'a-b'.join(['1', '2']) }} {{ 'abc'.isalpha() }} {{ '123'.isdigit() }} {{ '  '.isspace() }} {{ 'Ab'.islower() }} {{ 'ab'.islower() }} {{ 'x'.zfill(3) }} {{ 'a\\nb'.splitlines() }} {{ 'k=v'.partition('=') }}")
add("str_unicode_case", "{{ 'straße'.upper() }} {{ 'ÉCOLE'.lower() }} {{ 'élan vital'.title() }} {{ 'ß'|upper }}")
# filters
add("f_trim_length", "[{{ '  x  '|trim }}] {{ 'héllo'|length }} {{ [1, 2]|count }} {{ {'a': 1}|length }} [{{ 'xxhixx'|trim('x') }}] {{ undefined_thing|length }}")
add("f_case", "{{ 'hello WORLD'|upper }} {{ 'HeLLo'|lower }} {{ 'hello wORLD'|capitalize }} {{ 'hello-world foo(bar)'|title }}")
add("f_default", "{{ missing|default('d') }} {{ missing|d('e') }} {{ ''|default('f') }} {{ ''|default('g', true) }} {{ none|default('h') }} {{ 0|d(1, boolean=true) }}")
add("f_first_last", "{{ [1, 2, 3]|first }} {{ [1, 2, 3]|last }} {{ 'abc'|first }} {{ 'abc'|last }} [{{ []|first }}]")
add("f_join", "{{ [1, 2, 3]|join(', ') }} {{ ['a', 'b']|join }} {{ users|join(', ', attribute='name') }}", {"users": [{"name": "x"}, {"name": "y"}]})
add("f_replace", "{{ 'aaa'|replace('a', 'b') }} {{ 'aaa'|replace('a', 'b', 2) }} {{ 'abc'|replace('', '-') }}")
add("f_map_select", "{{ users|map(attribute='name')|list }} {{ ['a', 'B']|map('upper')|list }} {{ [1, 2, 3, 4]|select('odd')|list }} {{ [1, 2, 3, 4]|reject('even')|list }} {{ users|selectattr('admin')|map(attribute='name')|join }} {{ users|rejectattr('admin')|map(attribute='name')|join }} {{ users|selectattr('name', 'equalto', 'y')|list|length }} {{ [0, 1, '', 'a']|select|list }}", {"users": [{"name": "x", "admin": True}, {"name": "y", "admin": False}]})
add("f_map_default", "{{ users|map(attribute='role', default='guest')|list }}", {"users": [{"role": "admin"}, {}]})
add("f_list_string", "{{ 'ab'|list }} {{ {'k': 1}|list }} {{ 5|string }} {{ [1, 'a']|string }} {{ none|string }}")
add("f_numbers", "{{ '42'|int }} {{ '4.7'|int }} {{ 'x'|int }} {{ 'x'|int(7) }} {{ 3.9|int }} {{ '0x1A'|int(0, 16) }} {{ '2.5'|float }} {{ 'x'|float }} {{ 3|float }} {{ -3|abs }} {{ -2.5|abs }}")
add("f_round", "{{ 2.5|round }} {{ 3.5|round }} {{ 2.567|round(2) }} {{ 2.1|round(0, 'ceil') }} {{ 2.9|round(method='floor') }} {{ 3|round }}")
add("f_sort_unique", "{{ ['b', 'A', 'c']|sort }} {{ ['b', 'A', 'c']|sort(case_sensitive=true) }} {{ [3, 1, 2]|sort(reverse=true) }} {{ users|sort(attribute='age')|map(attribute='n')|join }} {{ ['a', 'A', 'b', 'a']|unique|list }} {{ [3, 1, 3, 2, 1]|unique|list }}", {"users": [{"n": "x", "age": 30}, {"n": "y", "age": 20}]})
add("f_dictsort_items", "{{ d|dictsort }} {{ d|dictsort(reverse=true) }} {{ d|dictsort(by='value') }} {{ d|items|list }}", {"d": {"b": 2, "A": 3, "c": 1}})
add("f_reverse", "{{ 'abc'|reverse }} {{ [1, 2, 3]|reverse|list }}")
add("f_batch", "{{ [1, 2, 3, 4, 5]|batch(2)|list }} {{ [1, 2, 3]|batch(2, 'x')|list }}")
add("f_sum_min_max", "{{ [1, 2, 3]|sum }} {{ [1.5, 2]|sum }} {{ items|sum(attribute='v') }} {{ [3, 1, 2]|min }} {{ ['b', 'A']|max }} {{ [3, 1, 2]|max }}", {"items": [{"v": 1}, {"v": 2}]})
add("f_indent", "{{ 'a\\nb\\n\\nc'|indent }}|{{ 'a\\nb'|indent(2, true) }}|{{ 'a\\n\\nb'|indent(2, blank=true) }}|{{ 'a\\nb'|indent('> ') }}")
add("f_center_wordcount", "[{{ 'ab'|center(7) }}] [{{ 'abc'|center(6) }}] {{ 'hello big world_x, 42'|wordcount }}")
add("f_escape_safe", "{{ '<a href=\"x\">&\\'</a>'|e }} {{ '<b>'|safe }} {{ '<i>'|escape }}")
add("f_truncate", "{{ 'hello world this is long'|truncate(12) }} {{ 'hello world this is long'|truncate(12, true) }} {{ 'short'|truncate(12) }}")
add("f_format", "{{ '%s is %d years'|format('Bob', 30) }}")
add("f_tojson", "{{ d|tojson }}|{{ d|tojson(indent=2) }}|{{ d|tojson(indent=2, separators=(',', ':')) }}|{{ [1, [], {}]|tojson(indent=1) }}|{{ d|tojson(sort_keys=true) }}", {"d": {"z": "é\"\\\n\t\u0001<>&", "a": [1, 2.5, 1.0, None, True, False], "m": {"x": 1e-7, "y": 1e16}}})
add("f_tojson_ascii", "{{ 'é🚀\\x7f'|tojson(true) }} {{ 'é'|tojson(ensure_ascii=true) }} {{ d|tojson(indent='\\t') }}", {"d": {"a": [1]}})
add("f_attr", "{{ d|attr('k') }}", {"d": {"k": 1}})
# tests
add("tests_types", "{{ 1 is number }} {{ true is number }} {{ 1 is integer }} {{ true is integer }} {{ 1.0 is float }} {{ 'a' is string }} {{ {} is mapping }} {{ [] is sequence }} {{ 'a' is sequence }} {{ {} is iterable }} {{ 1 is iterable }} {{ none is none }} {{ true is boolean }} {{ 1 is boolean }}")
add("tests_values", "{{ x is defined }} {{ y is undefined }} {{ true is true }} {{ 1 is true }} {{ false is false }} {{ 0 is false }} {{ 6 is divisibleby 3 }} {{ 7 is divisibleby(3) }} {{ 3 is odd }} {{ 4 is even }} {{ 'ab' is lower }} {{ 'AB' is upper }}", {"x": 1})
add("tests_compare", "{{ 1 is eq 1 }} {{ 1 is ne 2 }} {{ 1 is lt 2 }} {{ 2 is gt 1 }} {{ 2 is ge 2 }} {{ 2 is le 1 }} {{ 'a' is in 'abc' }} {{ 2 is in [1] }} {{ 1 is equalto 1 }} {{ x is sameas x }} {{ none is sameas none }} {{ f is callable }} {{ 1 is not none }} {{ 'upper' is filter }} {{ 'odd' is test }}", {"x": [1]})
add("tests_undefined_sequence", "{{ u is iterable }} {{ u is sequence }} {{ u is string }} {{ u is none }}")
# globals
add("globals", "{{ range(3)|list }} {{ range(1, 7, 2)|list }} {{ range(5, 0, -2)|list }} {{ dict(a=1, b='x') }} {% set j = joiner('+') %}{% for i in [1, 2, 3] %}{{ j() }}{{ i }}{% endfor %}")
add("cycler", "{% set c = cycler('a', 'b') %}{{ c.next() }}{{ c.next() }}{{ c.next() }}")
add("strings_adjacent_escapes", "{{ 'a' 'b' \"c\" }} {{ 'tab\\there' }} {{ '\\u00e9\\x41\\101' }} {{ 'keep \\d' }}")
add("literals", "{{ True }} {{ False }} {{ None }} {{ [1, 2,] }} {{ {'a': 1,} }} {{ 1_000 }} {{ 1.5e3 }} {{ (1) }}")
add("message_like", "{% for m in messages %}{{ m.role }}: {{ m['content'] }}{% if m.tool_calls %}{% for tc in m.tool_calls %} {{ tc.function.name }}({{ tc.function.arguments|tojson }}){% endfor %}{% endif %}\n{% endfor %}", {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "f", "arguments": {"a": 1, "b": [True, None]}}}]}]})
# errors (message checked loosely in C++: must throw)
ERR = []
def err(name, tpl, ctx=None):
    ERR.append((name, tpl, ctx or {}))
err("e_undefined_attr_chain", "{{ x.y }}")
err("e_missing_attr_chain", "{{ d.a.b }}", {"d": {}})
err("e_add_undefined", "{{ x + 1 }}")
err("e_str_plus_int", "{{ 'a' + 1 }}")
err("e_call_undefined_method", "{{ [1].startswith('a') }}")
err("e_list_append_unsafe", "{{ [1].append(2) }}")
err("e_unknown_filter", "{{ 1 | nofilter }}")
err("e_unknown_test", "{{ 1 is notatest }}")
err("e_unknown_tag", "{% do x %}")
err("e_unclosed_block", "{% if true %}x")
err("e_unclosed_var", "{{ x ")
err("e_tojson_undefined", "{{ x | tojson }}")
err("e_compare_types", "{{ 1 < 'a' }}")
err("e_div_zero", "{{ 1 / 0 }}")
err("e_none_iter", "{% for x in n %}{% endfor %}", {"n": None})
err("e_none_in", "{{ 'a' in n }}", {"n": None})
err("e_set_non_namespace", "{% set d = {} %}{% set d.x = 1 %}")

out = []
for name, tpl, ctx in C:
    try:
        r = env.from_string(tpl).render(**ctx)
    except Exception as e:
        print("UNEXPECTED ERROR", name, e, file=sys.stderr); continue
    out.append({"name": name, "template": tpl, "context": ctx, "expected": r})
for name, tpl, ctx in ERR:
    try:
        r = env.from_string(tpl).render(**ctx)
        print("NO ERROR", name, repr(r), file=sys.stderr)
    except Exception as e:
        out.append({"name": name, "template": tpl, "context": ctx, "error": f"{type(e).__name__}: {e}"})
json.dump({"oracle": "jinja2 " + jinja2.__version__, "cases": out}, open(sys.argv[1], "w", encoding="utf-8"), ensure_ascii=False, indent=1)
print(len(out), "cases")
