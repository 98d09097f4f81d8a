"""The template sandbox (`BoundedEnvironment`) refuses a result whose size is a product of two
things a template controls before building it, bounds what one render keeps alive, and leaves
ordinary templates' text as jinja2 writes it. Each attack here is scaled to build tens of
megabytes on a sandbox that checks only afterwards (the same templates at 250x built 1 GB
each); a test tells the refusal came first by its wording ("would ..."), and the two attacks
that would run away unrefused run in a child process with a memory limit and a timeout."""

import json
import subprocess
import sys
import textwrap

import jinja2.sandbox
import pytest

from rlvr.data.templates import TemplateLimitError, _tokenizer_environment_template

S = "{% set s = 'a' * 4000000 %}{% set t = 'bbbbb' %}"  # s at the value cap, t short

# Each result is about 5x the value cap (4 Mi); every argument is small or within the cap.
PRODUCTS = {
    "str.replace": "{{ s.replace('a', t) }}",
    "replace filter": "{{ s | replace('a', t) }}",
    "str.join": "{{ ''.join([s] * 5) }}",
    "join filter": "{{ ([s] * 5) | join }}",
    "join separator": "{{ (['a'] * 1000000) | join(t) }}",
    "join of a map": "{{ ([s] * 5) | map('upper') | join }}",
    "str.format": "{{ ('{0}' * 5).format(s) }}",
    "format widths": "{{ ('{0:>4000000}' * 5).format(1) }}",
    "nested width": "{{ ('{0:>{1}}' * 5).format(1, 4000000) }}",
    "percent": "{{ ('%(a)s' * 5) % {'a': s} }}",
    "percent star": "{{ '%*s%*s%*s%*s%*s' % (4000000, 1, 4000000, 1, 4000000, 1, 4000000, 1, "
                    "4000000, 1) }}",
    "format filter": "{{ ('%(a)s' * 5) | format(a=s) }}",
    "indent": "{{ ('a\\n' * 1000000) | indent(t) }}",
    "wordwrap": "{{ (' a' * 1000000) | wordwrap(1, wrapstring=t) }}",
    "expandtabs": "{{ ('\\t' * 1000000).expandtabs(20) }}",
    "translate": "{{ s.translate({97: t}) }}",
    "urlize": "{{ (' a.co' * 800000) | urlize(target=t) }}",
    "print a list": "{{ [s] * 5 }}",
    "string filter": "{{ ([s] * 5) | string }}",
    "concat a list": "{{ 'x' ~ [s] * 5 }}",
    "tojson": "{{ ([s] * 5) | tojson }}",
    "tojson indent": "{{ ([1] * 20) | tojson(indent=1000000) }}",
    "replace with a list": "{{ 'ab' | replace('a', [s] * 5) }}",
}


def render(text: str) -> str:
    template = _tokenizer_environment_template(text)
    return template.environment.render(template, messages=[], add_generation_prompt=True)


@pytest.mark.parametrize("name", sorted(PRODUCTS))
def test_a_product_too_big_is_refused_before_it_is_built(name):
    with pytest.raises(TemplateLimitError, match="would"):
        render(S + PRODUCTS[name])


def _child(text: str, timeout: float = 20.0) -> str:
    """`text` rendered in a child process under a 2 GB address-space limit: what it printed."""
    code = textwrap.dedent(f"""
        import resource, time
        resource.setrlimit(resource.RLIMIT_AS, (2_000_000_000, 2_000_000_000))
        from rlvr.data.templates import _tokenizer_environment_template
        template = _tokenizer_environment_template({text!r})
        start = time.monotonic()
        try:
            out = template.environment.render(template, messages=[])
            print("rendered", out[:40])
        except BaseException as e:
            print(type(e).__name__, e)
        print(f"seconds {{time.monotonic() - start:.1f}}")""")
    try:
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              timeout=timeout)
    except subprocess.TimeoutExpired:
        return "timed out"
    return done.stdout + done.stderr


def test_what_one_render_keeps_alive_is_bounded():
    # 1,000 distinct 16 MB strings, each under the per-value cap: 16 GB kept in a namespace
    kept = ("{% set ns = namespace(v=[]) %}{% set u = '\\U0001F600' * 4000000 %}"
            "{% for i in range(1000) %}{% set ns.v = ns.v + [u ~ i] %}{% endfor %}x")
    assert "bytes of values in one render" in _child(kept)


def test_what_one_render_builds_is_counted_per_render_not_per_thread():
    """Each render builds 2 MB; 400 of them on one thread (a dataset's rows, an episode's
    turns) build 800 MB in all, which the per-render cap must not add up: it did, and the
    135th render was refused."""
    template = _tokenizer_environment_template(
        "{% set s = 'a' * 1000000 %}{{ (s ~ 'b')|length }}")
    assert {template.environment.render(template, messages=[]) for _ in range(400)} == {"1000001"}


def test_summing_many_lists_takes_one_copy_not_one_per_list():
    # 200,000 one-item lists summed one by one copy 2e10 items (minutes, uninterruptible)
    out = _child("{{ (([[0]] * 200000) | sum(start=[])) | length }}", timeout=20)
    assert "rendered 200000" in out
    assert float(out.split("seconds ")[1]) < 5


def test_loops_that_call_nothing_meet_the_deadline_off_the_main_thread():
    """The interval timer that stops a render on the main thread does not run on others (the
    judge's scorer, the episodes' loop), where nested loops over a long string ran on: 1e10
    iterations, past the child's 20 s. Each loop's items now tick the deadline."""
    loops = ("{% set s = 'a' * 100000 %}{% for a in s %}{% for b in s %}{% endfor %}"
             "{% endfor %}x")
    code = textwrap.dedent(f"""
        import threading, time
        from rlvr.data.templates import _tokenizer_environment_template
        template = _tokenizer_environment_template({loops!r})
        def run():
            start = time.monotonic()
            try:
                template.environment.render(template, messages=[])
            except BaseException as e:
                print(type(e).__name__, e)
            print(f"seconds {{time.monotonic() - start:.1f}}")
        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        thread.join(20)""")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60).stdout
    assert "took over 2 s" in out and float(out.split("seconds ")[1]) < 5, out


def test_loops_keep_their_meaning():
    """Every loop's iterable goes through a ticking filter: loop variables, else, filters on
    the loop, recursion and unpacking as jinja2 renders them."""
    text = ("{% for x in xs %}{{ loop.index }}/{{ loop.length }}{{ 'L' if loop.last }}"
            "{{ loop.cycle('a', 'b') }} {% else %}empty{% endfor %}|{% for k, v in d.items() %}"
            "{{ k }}={{ v }};{% endfor %}|{% for x in xs if x > 1 %}{{ x }}{% endfor %}|"
            "{% for n in tree recursive %}{{ n.name }}({{ loop(n.children) }}){% endfor %}|"
            "{% for x in [] %}x{% else %}E{% endfor %}")
    values = dict(xs=[1, 2, 3], d={"a": 1, "b": 2},
                  tree=[{"name": "r", "children": [{"name": "c", "children": []}]}])
    template = _tokenizer_environment_template(text)
    assert template.environment.render(template, **values) == \
        jinja2.sandbox.ImmutableSandboxedEnvironment().from_string(text).render(**values)


# ---- ordinary templates render what jinja2 renders ------------------------------------

ORDINARY = [
    "{{ 'a-b-c'.replace('-', ', ') }} {{ 'x y' | replace(' ', '_') }}",
    "{{ ', '.join(['a', 'b']) }} {{ [1, 2, 3] | join('+') }} {{ messages | map(attribute='role')"
    " | join(',') }}",
    "{{ '{0}: {1:>5}|{2:.3f}'.format('k', 7, 2.5) }} {{ '{a}'.format_map({'a': 1}) }}",
    "{{ '%s=%05d' % ('n', 42) }} {{ '%(x)s!' | format(x='hi') }} {{ '%-4s|' | format('a') }}",
    "{{ 'a\\nb' | indent(2, first=true) }} {{ 'one two three' | wordwrap(5) }}",
    "{{ 'a\\tb'.expandtabs(4) }} {{ 'abc'.translate({97: 'A'}) }} {{ 'see x.co' | urlize }}",
    "{{ messages }} {{ [1, 'a', none] }} {{ {'k': [1, 2]} | string }} {{ 'n' ~ 3 ~ [1] }}",
    "{{ messages | tojson }} {{ {'b': 1, 'a': [1, 2]} | tojson(indent=2, sort_keys=true) }}",
    "{{ ([[1], [2, 3]] | sum(start=[])) }} {{ [1, 2] | sum }} {{ 'ab' | center(6) }}",
    "{% set ns = namespace(t='') %}{% for m in messages %}{% set ns.t = ns.t + m.content %}"
    "{% endfor %}{{ ns.t }} {{ ns }}",
]
MESSAGES = [{"role": "user", "content": "Hi 'there'\n"}, {"role": "assistant", "content": "é"}]


@pytest.mark.parametrize("text", ORDINARY)
def test_ordinary_templates_render_as_jinja2_renders_them(text):
    plain = jinja2.sandbox.ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    plain.filters["tojson"] = lambda x, **kw: json.dumps(x, ensure_ascii=False, **kw)
    template = _tokenizer_environment_template(text)
    assert (template.environment.render(template, messages=MESSAGES)
            == plain.from_string(text).render(messages=MESSAGES))


# ---- callables bounded before they run (issue 48) -------------------------------------

# Each ran in C or in a Python loop no deadline reaches off the main thread; scaled down here
# so that the old sandbox renders them (small) instead of taking gigabytes or seconds.
BEFORE_THEY_RUN = {
    # strftime_now('%9999Y' * 100000): 1 GB and 1.1 s in strftime; 600,000 repeats 4.3 GB, 20.7 s
    "a long strftime format": ("{{ strftime_now('%9999Y' * 2000) }}", "format of 12,000"),
    "a wide strftime field": ("{{ strftime_now('%99999Y') }}", "field width of 99999"),
    "a flagged wide field": ("{{ strftime_now('%_0100d') }}", "field width of 100"),
    # 2000 * 20000 words in a Python loop: past 2 s, stopped only by the main thread's timer
    "lipsum": ("{{ lipsum(100, max=20000) | length }}", "lipsum for 100 paragraphs"),
    # one C multiplication per squaring: 12 of 2**40000 took ~1 s, 14 take seconds, 16 minutes
    "integer squaring": ("{% set b = 2 %}{% set ns = namespace(x=1) %}{% set ns.x = b ** 40000 %}"
                         "{% for i in range(12) %}{% set ns.x = ns.x * ns.x %}{% endfor %}"
                         "{{ ns.x.bit_length() }}", "multiplies integers"),
    # punycode is a Python loop: 4M characters ran past 2 s
    "a Python codec": ("{{ ('a' * 1000).encode().decode('punycode') | length }}", "punycode"),
    "idna": ("{{ 'paris'.encode('idna') }}", "idna"),
}


@pytest.mark.parametrize("name", sorted(BEFORE_THEY_RUN))
def test_a_callable_is_bounded_before_it_runs(name):
    text, refusal = BEFORE_THEY_RUN[name]
    with pytest.raises(TemplateLimitError, match=refusal):
        render(text)


def test_the_bounded_callables_keep_their_ordinary_uses():
    out = render("{{ strftime_now('%Y-%m-%d') | length }} {{ strftime_now('%d %B %Y, %H:%M') "
                 "!= '' }} {{ strftime_now('%%9999Y') }} {{ strftime_now('%_64d') | length }} "
                 "{{ lipsum(2, html=false) | length > 0 }} {{ (3 * 4) * (2 ** 100) }} "
                 "{{ 'é'.encode() | length }} {{ 'é'.encode('utf-16-le').decode('utf-16-le') }}")
    assert out == f"10 True %9999Y 64 True {12 * 2 ** 100} 2 é"
