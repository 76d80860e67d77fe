"""The most a run can spend: a worst-case quote of cost (USD) and tokens, per pipeline.

Every path the explorer finds is weighed: a path is the number of visits it makes to each
phase, and each visit costs at most the same, whatever came before it. So the quote is the
largest, over the visit counts `explore` reached, of the sum of visits times the dearest visit
of each phase. A visit of a phase runs each worker once per lane (`for_each`: `max_items`
lanes), and each task makes at most `retries + 1` attempts with its model and as many with
each fallback model, every call answered at its output limit and charged at its dearest rate
(cache writes for input, reasoning for output, when dearer). An attempt is one call, or up to
`max_turns` calls for a worker with `tools`; their prompts hold tool results, which nothing
limits, so they count at the model's context window.

The prompt of a call is estimated, since it is only known when it is sent:

    PROMPT_TOKENS (the default system message, headings, the output instruction)
    + the system message and the task template, at CHARS_PER_TOKEN characters a token
    + the topic (once more when the template uses it) and each input the template uses
    + the schema, when the answer has one
    + for each file read: FILE_TOKENS plus its writer's output limit, once per lane read
    + the item, in a fan-out whose template uses it: the output limit of the worker whose
      list is fanned out
    + signal data, when the template uses it: no limit, so the context window

and never more than the model's context window, when it is known: a larger prompt is refused
before any call. At `check` the topic and inputs are not known yet and each is taken to be
ASSUMED_TEXT_TOKENS long (or its default, when longer); at `run` their real sizes are used.

A model without a price, or a worker whose calls have no output limit, leaves the quote
without a bound: each such worker is named with the setting that bounds it. Command and call
workers cost nothing (no usage is recorded for them), and neither does the offline stand-in.
A `pipeline` worker costs its child's worst case once per attempt (a retry starts a new child).
Reviews are not in the quote: each rejection can add one more pass from the phase it sends
the run back to (`max_rejections` bounds how many). Pure: prices come in as data.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from interlock.core.templates import TemplateProblem, template_names
from interlock.core.tools import DEFAULT_MAX_TURNS
from interlock.core.ways import Ways
from interlock.core.workflow import Budget, Phase, Pipeline, Worker

CHARS_PER_TOKEN = 4  # the same rough rule the runtime uses to check a prompt's size
PROMPT_TOKENS = 300
FILE_TOKENS = 30
ASSUMED_TEXT_TOKENS = 1_000

Visits = tuple[tuple[str, int], ...]


def text_tokens(text: str) -> int:
    """Tokens of `text` by the estimate rule (rounded up)."""
    return -(-len(text) // CHARS_PER_TOKEN)


@dataclass(frozen=True, kw_only=True)
class ModelTerms:
    """What calls to one model alias cost, as one worker makes them (its `params` applied).

    Rates are the dearest that apply (USD per million tokens); None means no known price.
    """

    input_usd_per_mtok: float | None
    output_usd_per_mtok: float | None
    max_output_tokens: int | None  # None: no limit on an answer
    context_tokens: int | None = None  # no larger prompt is ever sent
    free: bool = False  # never charged (the offline stand-in)
    # Why the answer has no limit when no setting could give one (an agent CLI), else None.
    unlimited_why: str | None = None
    # Dearer rates of a call whose prompt is longer than a threshold, lowest threshold
    # first: (above this many input tokens, input rate, output rate).
    long_context: tuple[tuple[int, float | None, float | None], ...] = ()

    def rates_for(self, prompt: int | None) -> tuple[float | None, float | None]:
        """The rates of a call with a prompt of `prompt` tokens (None: of any length)."""
        rates = (self.input_usd_per_mtok, self.output_usd_per_mtok)
        for above, input_rate, output_rate in self.long_context:
            if prompt is None or prompt > above:
                rates = (input_rate, output_rate)
        return rates


@dataclass(frozen=True, kw_only=True)
class TextSizes:
    """How long the run's topic and inputs are, in tokens."""

    topic: int
    inputs: Mapping[str, int] = field(default_factory=dict)
    assumed: bool = False  # True at `check`, before a run gives them

    @classmethod
    def assumed_for(cls, pipeline: Pipeline) -> TextSizes:
        """The sizes `check` assumes: ASSUMED_TEXT_TOKENS each, or a longer default's."""
        inputs = {
            key: max(ASSUMED_TEXT_TOKENS, text_tokens(str(spec.default or "")))
            for key, spec in pipeline.inputs.items()
        }
        return cls(topic=ASSUMED_TEXT_TOKENS, inputs=inputs, assumed=True)

    @classmethod
    def of_run(cls, topic: str, inputs: Mapping[str, Any]) -> TextSizes:
        """The sizes of a run's own topic and inputs."""
        return cls(
            topic=text_tokens(topic), inputs={k: text_tokens(str(v)) for k, v in inputs.items()}
        )


@dataclass(frozen=True, kw_only=True)
class TaskQuote:
    """The most one task of a worker spends in one visit (all its attempts)."""

    role: str
    phase: str
    lanes: int  # tasks per visit of the phase
    calls: int  # the most model calls one task makes (0 for commands)
    prompt_tokens: int | None  # the largest prompt of one call
    usd: float | None  # None: no bound
    tokens: int | None


@dataclass(frozen=True, kw_only=True)
class Quote:
    """The worst case of one pipeline; None amounts have no bound (see the reasons)."""

    pipeline: str
    usd: float | None
    tokens: int | None
    usd_path: Visits  # the visits of the dearest path
    tokens_path: Visits
    tasks: tuple[TaskQuote, ...]
    usd_unbounded: tuple[str, ...] = ()  # one line per worker: why, and how to bound it
    tokens_unbounded: tuple[str, ...] = ()
    complete: bool = True  # False: exploring stopped early, so this is not a bound
    # False: the amounts are a bound that the dearest run may cost less than (loops back with
    # too many runs to weigh one by one: `interlock.core.flow_bound`), and the path is the
    # bound's visits, which perhaps no run makes.
    exact: bool = True
    assumed: bool = False  # topic and inputs were assumed, not measured
    # One line per worker whose spend is not in the amounts: a `call:` function's own model
    # calls (`ctx.model`), which the run's budget holds back one by one as they are made.
    not_quoted: tuple[str, ...] = ()
    # The roles of those workers (a child pipeline's as "role (in parent role)"), in order.
    uncounted: tuple[str, ...] = ()

    def over_budget(self, budget: Budget | None, *, reasons: bool = True) -> list[str]:
        """What in this quote the budget may not cover, one line each (empty: it covers it).

        `reasons=False` leaves out why the worst case has no bound, for a caller that shows
        the quote's "no bound" lines anyway: each reason is then said once.
        """
        if budget is None:
            return []
        where = f"pipeline {self.pipeline!r}"
        action = "pause" if budget.on_exceed == "pause" else "fail"
        lines = []
        limits = (
            (budget.max_cost_usd, self.usd, self.usd_unbounded, "max_cost_usd", _usd),
            (budget.max_tokens, self.tokens, self.tokens_unbounded, "max_tokens", _tokens),
        )
        for limit, most, unbounded, key, show in limits:
            if limit is None:
                continue
            if most is None:
                lines.append(
                    f"{where}: its budget ({key} {limit:g}) may be reached: the worst case has no "
                    + (
                        f"bound ({'; '.join(unbounded)})"
                        if reasons
                        else "bound (the quote's 'no bound' lines say why)"
                    )
                )
            elif most > limit:
                lines.append(
                    f"{where}: a run can use up to {show(most)}, over its budget ({key} "
                    f"{limit:g}): the budget would {action} such a run; raise {key} or lower the "
                    "worst case (fewer retries, max_visits or max_items, smaller output limits)"
                )
        return lines

    def to_json(self) -> dict[str, Any]:
        """The quote as JSON values."""
        return {
            "pipeline": self.pipeline,
            "max_cost_usd": self.usd,
            "max_tokens": self.tokens,
            "cost_unbounded": list(self.usd_unbounded),
            "tokens_unbounded": list(self.tokens_unbounded),
            "not_quoted": list(self.not_quoted),
            "dearest_path": dict(self.usd_path),
            "complete": self.complete,
            "exact": self.exact,
            "assumed_text_tokens": self.assumed,
            "tasks": [
                {
                    "role": t.role,
                    "phase": t.phase,
                    "lanes": t.lanes,
                    "calls": t.calls,
                    "prompt_tokens": t.prompt_tokens,
                    "cost_usd": t.usd,
                    "tokens": t.tokens,
                }
                for t in self.tasks
            ],
        }


def _usd(value: float) -> str:
    return f"${value:,.4f}"


def _tokens(value: float) -> str:
    return f"{int(value):,} tokens"


@dataclass
class _Bounds:
    """What is known so far of one pipeline: task costs and the reasons some have no bound."""

    pipeline: Pipeline
    terms: Mapping[tuple[str, str], ModelTerms]
    sizes: TextSizes
    children: Mapping[str, Quote] = field(default_factory=dict)
    usd_unbounded: dict[str, None] = field(default_factory=dict)
    tokens_unbounded: dict[str, None] = field(default_factory=dict)
    not_quoted: dict[str, None] = field(default_factory=dict)
    uncounted: dict[str, None] = field(default_factory=dict)

    def output_limit(self, worker: Worker) -> int | None:
        """The longest output `worker` can write, in tokens (None: no limit)."""
        if worker.model is None:
            return None
        limits = [self.terms[(worker.role, a)].max_output_tokens for a in _chain(worker)]
        return None if None in limits else max(x for x in limits if x is not None)

    def prompt(self, phase: Phase, worker: Worker) -> tuple[int | None, list[str]]:
        """The largest prompt before the context window (None: no bound), and why it has no
        bound, when the cause is not a model worker whose own line says so."""
        pipeline = self.pipeline
        try:
            names = template_names(worker.task)
            system_names = template_names(worker.system or "")
        except TemplateProblem:
            names, system_names = set(), set()
        total = PROMPT_TOKENS + text_tokens(worker.system or "") + text_tokens(worker.task)
        total += self.sizes.topic * (1 + ("topic" in names) + ("topic" in system_names))
        names |= system_names
        used = set(pipeline.inputs) if "inputs" in names else names & set(pipeline.inputs)
        total += sum(self.sizes.inputs.get(k, ASSUMED_TEXT_TOKENS) for k in sorted(used))
        if isinstance(worker.output_schema, dict):
            total += text_tokens(str(worker.output_schema))
        why: list[str] = []
        open_ended = False  # holds the output of a model worker with no output limit
        if "signals" in names:
            why.append("its task holds signal data, whose size has no limit")
        if phase.for_each is not None and "item" in names:
            source = pipeline.worker(phase.for_each.items.rpartition(".")[0])
            limit = self.output_limit(source)
            if limit is None and source.model is None:
                why.append(f"its item comes from {_writer(source)}, whose output has no limit")
            open_ended |= limit is None
            total += limit or 0
        for entry in worker.reads:
            name = entry.removesuffix("?")
            writer = pipeline.worker(pipeline.writers[name])
            lanes = _lanes(pipeline.phase_of(writer.role))
            if pipeline.phase_of(writer.role) is phase and phase.for_each is not None:
                lanes = 1  # a lane reads its own lane's output
            limit = self.output_limit(writer)
            if limit is None and writer.model is None:
                why.append(
                    f"it reads {name!r}, written by {_writer(writer)}, whose output has no limit"
                )
            open_ended |= limit is None
            total += lanes * (FILE_TOKENS + (limit or 0))
        return (None if why or open_ended else total), why

    def task(self, phase: Phase, worker: Worker) -> TaskQuote:
        """The most one task of `worker` spends in one visit of `phase`."""
        lanes = _lanes(phase)
        if worker.pipeline is not None:
            return self._child(phase, worker, lanes)
        if worker.call is not None:
            self.not_quoted[
                f"phase {phase.id!r}, worker {worker.role!r}: the model calls its call: "
                "function makes (ctx.model), held back one by one by the run's budget"
            ] = None
            self.uncounted[worker.role] = None
        if worker.model is None:
            return TaskQuote(
                role=worker.role, phase=phase.id, lanes=lanes, calls=0, prompt_tokens=0,
                usd=0.0, tokens=0,
            )  # fmt: skip
        place = f"phase {phase.id!r}, worker {worker.role!r}"
        base, why = self.prompt(phase, worker)
        turns = 1
        if worker.tools:
            # A tool loop calls the model up to max_turns times in one attempt, each call
            # with every earlier turn and tool result, whose size nothing limits.
            turns = worker.max_turns or DEFAULT_MAX_TURNS
            base, why = None, [*why, "its prompt holds tool results, whose size has no limit"]
        usd: float | None = 0.0
        tokens: int | None = 0
        largest: int | None = 0
        for alias in _chain(worker):
            terms = self.terms[(worker.role, alias)]
            prompt = base
            if terms.context_tokens is not None:
                prompt = terms.context_tokens if base is None else min(base, terms.context_tokens)
            elif why:
                self._unbounded(
                    f"{place}: model {alias!r}: {'; '.join(why)}: set context_tokens in "
                    f"[models.{alias}] (the model's window: no larger prompt is sent)",
                    usd=not terms.free,
                )
            answer = terms.max_output_tokens
            if answer is None:
                fix = terms.unlimited_why or (
                    f"set max_output_tokens in [models.{alias}] or in the worker's params"
                )
                self._unbounded(
                    f"{place}: model {alias!r} has no output limit: {fix}", usd=not terms.free
                )
            rates = terms.rates_for(prompt)
            if not terms.free and None in rates:
                self.usd_unbounded[
                    f"{place}: model {alias!r} has no known price: set input_price_per_mtok and "
                    f"output_price_per_mtok in [models.{alias}]"
                ] = None
            calls = (worker.retries + 1) * turns
            largest = None if largest is None or prompt is None else max(largest, prompt)
            if prompt is None or answer is None:
                tokens = None
                if not terms.free:
                    usd = None
                continue
            tokens = None if tokens is None else tokens + calls * (prompt + answer)
            if usd is not None and not terms.free:
                if rates[0] is None or rates[1] is None:
                    usd = None
                else:
                    usd += calls * (prompt * rates[0] + answer * rates[1]) / 1_000_000
        return TaskQuote(
            role=worker.role, phase=phase.id, lanes=lanes, calls=worker.max_attempts * turns,
            prompt_tokens=largest, usd=usd, tokens=tokens,
        )  # fmt: skip

    def _child(self, phase: Phase, worker: Worker, lanes: int) -> TaskQuote:
        """A child run's worst case, once per attempt of the worker."""
        attempts = worker.retries + 1
        child = self.children.get(worker.role)
        place = f"phase {phase.id!r}, worker {worker.role!r}, child pipeline {worker.child_name!r}"
        if child is None:
            self._unbounded(f"{place}: not quoted", usd=True)
            return TaskQuote(
                role=worker.role, phase=phase.id, lanes=lanes, calls=attempts,
                prompt_tokens=None, usd=None, tokens=None,
            )  # fmt: skip
        for line in child.usd_unbounded:
            self.usd_unbounded[f"{place}: {line}"] = None
        for line in child.tokens_unbounded:
            self.tokens_unbounded[f"{place}: {line}"] = None
        for line in child.not_quoted:
            self.not_quoted[f"{place}: {line}"] = None
        for role in child.uncounted:
            self.uncounted[f"{role} (in {worker.role})"] = None
        calls = sum(t.calls * t.lanes for t in child.tasks)
        prompts = [t.prompt_tokens for t in child.tasks if t.calls]
        known = [p for p in prompts if p is not None]
        largest = max(known, default=0) if len(known) == len(prompts) else None
        return TaskQuote(
            role=worker.role, phase=phase.id, lanes=lanes, calls=attempts * calls,
            prompt_tokens=largest,
            usd=None if child.usd is None else attempts * child.usd,
            tokens=None if child.tokens is None else attempts * child.tokens,
        )  # fmt: skip

    def _unbounded(self, line: str, *, usd: bool) -> None:
        self.tokens_unbounded[line] = None
        if usd:
            self.usd_unbounded[line] = None


def _chain(worker: Worker) -> list[str]:
    return list(dict.fromkeys([worker.model or "", *worker.fallback_models]))


def _lanes(phase: Phase) -> int:
    return phase.for_each.max_items if phase.for_each is not None else 1


def _writer(worker: Worker) -> str:
    return f"{worker.kind} worker {worker.role!r}"


def quote(
    name: str,
    pipeline: Pipeline,
    *,
    terms: Mapping[tuple[str, str], ModelTerms],
    sizes: TextSizes,
    visit_counts: Iterable[Visits] | Ways,
    complete: bool = True,
    children: Mapping[str, Quote] | None = None,
) -> Quote:
    """The worst case of `pipeline` over the paths `explore` found.

    Args:
        name: the pipeline's name, for messages.
        pipeline: the pipeline.
        terms: (role, alias) -> what that worker's calls to that alias cost, for every model
            of every model worker (fallbacks included).
        sizes: how long the topic and inputs are (assumed at `check`).
        visit_counts: the visit counts per phase that `explore` reached (`visit_counts`), or
            the ways it went (`ways`: exact also where exploring merged histories).
        complete: whether exploring covered every path (False: the quote is not a bound).
        children: role -> the worst case of the child run a `pipeline` worker starts (each
            attempt starts one).
    """
    bounds = _Bounds(pipeline, terms, sizes, dict(children or {}))
    tasks = tuple(bounds.task(phase, w) for phase in pipeline.phases for w in phase.workers)
    per_visit_usd: dict[str, float | None] = {}
    per_visit_tokens: dict[str, int | None] = {}
    for phase in pipeline.phases:
        mine = [t for t in tasks if t.phase == phase.id]
        usd = [t.usd for t in mine]
        tokens = [t.tokens for t in mine]
        per_visit_usd[phase.id] = None if None in usd else sum(t.lanes * (t.usd or 0) for t in mine)
        per_visit_tokens[phase.id] = (
            None if None in tokens else sum(t.lanes * (t.tokens or 0) for t in mine)
        )
    usd_most, usd_path = _dearest(visit_counts, per_visit_usd)
    tokens_most, tokens_path = _dearest(visit_counts, per_visit_tokens)
    order = {phase.id: index for index, phase in enumerate(pipeline.phases)}
    usd_path, tokens_path = (
        tuple(sorted(path, key=lambda visit: order.get(visit[0], 0)))
        for path in (usd_path, tokens_path)
    )
    return Quote(
        pipeline=name,
        usd=usd_most,
        tokens=None if tokens_most is None else int(tokens_most),
        usd_path=usd_path,
        tokens_path=tokens_path,
        tasks=tasks,
        usd_unbounded=tuple(bounds.usd_unbounded) if usd_most is None else (),
        tokens_unbounded=tuple(bounds.tokens_unbounded) if tokens_most is None else (),
        complete=complete and all(q.complete for q in (children or {}).values()),
        exact=(not isinstance(visit_counts, Ways) or visit_counts.exact)
        and all(q.exact for q in (children or {}).values()),
        assumed=sizes.assumed,
        not_quoted=tuple(bounds.not_quoted),
        uncounted=tuple(bounds.uncounted),
    )


def _dearest(
    visit_counts: Iterable[Visits] | Ways, per_visit: Mapping[str, float | int | None]
) -> tuple[float | None, Visits]:
    """The largest total over the paths, and that path's visits (None: a path has no bound)."""
    if isinstance(visit_counts, Ways):
        return visit_counts.dearest(per_visit)
    best: tuple[float, int] = (0.0, 0)
    path: Visits = ()
    for visits in sorted(visit_counts):  # sorted: ties pick the same path every time
        total = 0.0
        for phase, count in visits:
            cost = per_visit.get(phase, 0)
            if cost is None:
                return None, visits
            total += count * cost
        # Equal totals (free phases): the longest path is the one worth showing.
        mine = (total, sum(count for _, count in visits))
        if mine > best or not path:
            best, path = mine, visits
    return best[0], path


def call_worst_cases(
    pipeline: Pipeline, *, terms: Mapping[tuple[str, str], ModelTerms], sizes: TextSizes
) -> dict[str, float]:
    """role -> the most one call of that model worker can cost (USD), the dearest of its
    models (fallbacks included), its prompt estimated as the quote does and its answer at the
    output limit. What a budget reserves before a call starts (`core.decide`).

    A worker is left out when one of its models has no price or no output limit, when its
    prompt has no bound, or when it uses `tools` (an attempt is several calls): a budget
    treats its calls as it always did, stopping only once recorded spend reaches it.
    """
    bounds = _Bounds(pipeline, terms, sizes)
    worst: dict[str, float] = {}
    for phase in pipeline.phases:
        for worker in phase.workers:
            if worker.model is None or worker.pipeline is not None or worker.tools:
                continue
            base, _ = bounds.prompt(phase, worker)
            costs: list[float] = []
            for alias in _chain(worker):
                known = terms[(worker.role, alias)]
                prompt = base
                if known.context_tokens is not None:
                    prompt = (
                        known.context_tokens if base is None else min(base, known.context_tokens)
                    )
                rates = known.rates_for(prompt)
                if known.free:
                    costs.append(0.0)
                elif prompt is None or known.max_output_tokens is None or None in rates:
                    break
                else:
                    answer = known.max_output_tokens
                    costs.append((prompt * (rates[0] or 0) + answer * (rates[1] or 0)) / 1e6)
            else:
                worst[worker.role] = max(costs)
    return worst
