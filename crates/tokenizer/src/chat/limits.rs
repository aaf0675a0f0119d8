//! Hard limits on rendering a chat template (see [`TemplateLimits`]).
//!
//! minijinja's fuel counts VM instructions, but one instruction (`~`, `*`, a filter) can
//! do work or allocate memory in proportion to its operands. So, before rendering:
//!
//! - the source is size-checked and scanned token by token (minijinja's lexer) for
//!   over-long expressions, whose left-nested AST would overflow the stack in the
//!   parser, code generator or drop;
//! - the compiled instructions are rewritten (minijinja's `unstable_machinery`): every
//!   operator that can grow a value (`~`, `+`, `*`, slicing) first calls a check that
//!   sizes the result before it is built, raw template text is counted as it is
//!   written, and loop iterations, comparisons, calls, splats and container builds call
//!   a "tick" that checks the deadline;
//! - every builtin filter, the Python-compat methods and `{{ }}` output go through
//!   wrappers that size their result from the arguments before delegating.
//!
//! All of this shares one [`Budget`] per rendering, which counts the bytes of every
//! value and every piece of output made, so that also the cumulative memory a template
//! can make is bounded ([`TemplateLimits::max_total`]).

use std::collections::BTreeMap;
use std::fmt::{self, Write as _};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use minijinja::machinery::{ast, Instruction, Instructions, Token, WhitespaceConfig};
use minijinja::syntax::SyntaxConfig;
use minijinja::value::{Rest, Value, ValueKind};
use minijinja::{Environment, Error, ErrorKind, State};

/// Hard limits on one rendering of a chat template. An over-limit template fails with an
/// error naming the limit (e.g. `chat template: output exceeds 16 MiB
/// (TemplateLimits::max_output)`), never a panic, abort or hang.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TemplateLimits {
    /// The most bytes the rendering may produce. Default 16 MiB.
    pub max_output: usize,
    /// The largest single value a template may make: a string of this many bytes, or a
    /// list/map of this many bytes of entries (16 bytes per entry of a list, 32 per entry
    /// of a map); checked before the value is built. Default 16 MiB.
    pub max_value: usize,
    /// The most bytes of values and output a template may make in all, counted as they
    /// are made (transient values included), which bounds the memory it can hold.
    /// Default 256 MiB.
    pub max_total: usize,
    /// The largest template source in bytes. Default 1 MiB.
    pub max_source: usize,
    /// The most operators, filters, attribute lookups, calls and brackets in one
    /// `{{ ... }}` or `{% ... %}` tag: a bound on expression nesting, checked before
    /// parsing. (Statement nesting is bounded by minijinja's parser.) Default 2,000.
    pub max_expression: usize,
    /// The most lists and maps a template may build at run time (literals with
    /// variables, and list/map results of filters and methods): a bound on how deep a
    /// value can nest. Default 100,000.
    pub max_containers: usize,
    /// Wall-clock limit for compiling and rendering. Default 10 s.
    pub timeout: Duration,
    /// minijinja fuel: the most VM instructions. Default 50,000,000.
    pub fuel: u64,
}

impl Default for TemplateLimits {
    fn default() -> TemplateLimits {
        TemplateLimits {
            max_output: 16 << 20,
            max_value: 16 << 20,
            max_total: 256 << 20,
            max_source: 1 << 20,
            max_expression: 2_000,
            max_containers: 100_000,
            timeout: Duration::from_secs(10),
            fuel: 50_000_000,
        }
    }
}

/// Bytes charged per list entry (a minijinja `Value` is 16 bytes on 64-bit targets).
const ITEM: usize = 16;

/// The stack of the rendering thread: parsing, code generation, the VM's recursion and
/// dropping nested values are recursive.
pub(crate) const STACK: usize = 256 << 20;

/// Sizes as "16 MiB" when exact, else bytes.
pub(crate) fn human(n: usize) -> String {
    if n >= 1 << 20 && n.is_multiple_of(1 << 20) {
        format!("{} MiB", n >> 20)
    } else if n >= 1 << 10 && n.is_multiple_of(1 << 10) {
        format!("{} KiB", n >> 10)
    } else {
        format!("{n} bytes")
    }
}

fn limit_err(msg: String) -> Error {
    Error::new(ErrorKind::InvalidOperation, msg)
}

/// The shared counters of one rendering.
pub(crate) struct Budget {
    pub(crate) limits: TemplateLimits,
    deadline: Instant,
    total: AtomicUsize,
    containers: AtomicUsize,
}

impl Budget {
    pub(crate) fn new(limits: &TemplateLimits) -> Arc<Budget> {
        Arc::new(Budget {
            limits: limits.clone(),
            deadline: Instant::now() + limits.timeout,
            total: AtomicUsize::new(0),
            containers: AtomicUsize::new(0),
        })
    }

    /// Fails once the deadline has passed.
    pub(crate) fn tick(&self) -> Result<(), Error> {
        if Instant::now() > self.deadline {
            return Err(self.timeout_err());
        }
        Ok(())
    }

    pub(crate) fn timeout_err(&self) -> Error {
        limit_err(format!("rendering took more than {:?} (TemplateLimits::timeout)", self.limits.timeout))
    }

    pub(crate) fn value_err(&self) -> Error {
        limit_err(format!("a value exceeds {} (TemplateLimits::max_value)", human(self.limits.max_value)))
    }

    fn total_err(&self) -> Error {
        limit_err(format!(
            "the template made more than {} of values and output in all (TemplateLimits::max_total)",
            human(self.limits.max_total)
        ))
    }

    /// Checks that a value of `bytes` may be made, and counts it.
    pub(crate) fn charge(&self, bytes: usize) -> Result<(), Error> {
        if bytes > self.limits.max_value {
            return Err(self.value_err());
        }
        self.charge_total(bytes)
    }

    /// Counts `bytes` of output or value against the cumulative limit only.
    fn charge_total(&self, bytes: usize) -> Result<(), Error> {
        let before = self.total.fetch_add(bytes, Ordering::Relaxed);
        if before.saturating_add(bytes) > self.limits.max_total {
            return Err(self.total_err());
        }
        Ok(())
    }

    /// Checks a list of `n` entries.
    fn check_items(&self, n: usize) -> Result<(), Error> {
        match n.checked_mul(ITEM) {
            Some(b) if b <= self.limits.max_value => Ok(()),
            _ => Err(self.value_err()),
        }
    }

    /// Counts one list or map built at run time.
    fn container(&self) -> Result<(), Error> {
        let n = self.containers.fetch_add(1, Ordering::Relaxed) + 1;
        if n > self.limits.max_containers {
            return Err(limit_err(format!(
                "the template built more than {} lists and maps (TemplateLimits::max_containers)",
                self.limits.max_containers
            )));
        }
        Ok(())
    }

    /// Counts a value made by a filter, method or function.
    fn charge_result(&self, v: &Value) -> Result<(), Error> {
        match v.kind() {
            ValueKind::String | ValueKind::Bytes => self.charge(str_len(v)),
            ValueKind::Seq | ValueKind::Map | ValueKind::Iterable => {
                self.container()?;
                let per = if v.kind() == ValueKind::Map { 2 * ITEM } else { ITEM };
                match v.len() {
                    Some(n) => self.charge(n.saturating_mul(per)),
                    None => Ok(()),
                }
            }
            _ => Ok(()),
        }
    }

    /// The length of `v`'s text (`Display`), or the value error once it would pass `cap`.
    fn display_len(&self, v: &Value, cap: usize) -> Result<usize, Error> {
        if let Some(s) = v.as_str() {
            return if s.len() > cap { Err(self.value_err()) } else { Ok(s.len()) };
        }
        let mut c = Counter { n: 0, cap };
        write!(c, "{v}").map_err(|_| self.value_err())?;
        Ok(c.n)
    }

    /// Checks that a string of `bytes` (an estimate from the arguments) may be made.
    fn check_len(&self, bytes: usize) -> Result<(), Error> {
        if bytes > self.limits.max_value {
            return Err(self.value_err());
        }
        Ok(())
    }
}

/// Byte length of a string value (`Value::len` counts chars).
fn str_len(v: &Value) -> usize {
    v.as_str().map(str::len).or_else(|| v.as_bytes().map(<[u8]>::len)).unwrap_or(0)
}

/// A `fmt::Write` that counts bytes and fails past `cap`.
struct Counter {
    n: usize,
    cap: usize,
}

impl fmt::Write for Counter {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        self.n += s.len();
        if self.n > self.cap {
            return Err(fmt::Error);
        }
        Ok(())
    }
}

/// A `String` that fails past `cap`.
pub(crate) struct Capped {
    pub(crate) s: String,
    cap: usize,
}

impl Capped {
    pub(crate) fn new(cap: usize) -> Capped {
        Capped { s: String::new(), cap }
    }

    /// Fails (with `fmt::Error`) if `n` more bytes would pass the cap.
    pub(crate) fn reserve(&self, n: usize) -> fmt::Result {
        match self.s.len().checked_add(n) {
            Some(l) if l <= self.cap => Ok(()),
            _ => Err(fmt::Error),
        }
    }
}

impl fmt::Write for Capped {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        self.reserve(s.len())?;
        self.s.push_str(s);
        Ok(())
    }
}

// ---------------------------------------------------------------------------------
// Before parsing

/// The source-size and expression-length checks, before anything recursive runs.
pub(crate) fn prescan(source: &str, limits: &TemplateLimits) -> Result<(), String> {
    if source.len() > limits.max_source {
        return Err(format!(
            "the source is {} bytes, over {} (TemplateLimits::max_source)",
            source.len(),
            human(limits.max_source)
        ));
    }
    let mut ops = 0usize;
    for tok in minijinja::machinery::tokenize(source, false, syntax(), ws_config()) {
        // A lexer error is left to the parser to report.
        let Ok((tok, span)) = tok else { return Ok(()) };
        let counts = match tok {
            Token::VariableStart | Token::BlockStart => {
                ops = 0;
                false
            }
            Token::Ident(w) => matches!(w, "and" | "or" | "not" | "is" | "in" | "if" | "else"),
            Token::Plus
            | Token::Minus
            | Token::Mul
            | Token::Div
            | Token::FloorDiv
            | Token::Pow
            | Token::Mod
            | Token::Dot
            | Token::Tilde
            | Token::Pipe
            | Token::Eq
            | Token::Ne
            | Token::Gt
            | Token::Gte
            | Token::Lt
            | Token::Lte
            | Token::BracketOpen
            | Token::ParenOpen
            | Token::BraceOpen => true,
            _ => false,
        };
        if counts {
            ops += 1;
            if ops > limits.max_expression {
                return Err(format!(
                    "an expression on line {} has more than {} operators, filters, lookups and brackets \
                     (TemplateLimits::max_expression)",
                    span.start_line, limits.max_expression
                ));
            }
        }
    }
    Ok(())
}

/// The default syntax (a unit struct unless minijinja's `custom_syntax` is on).
#[allow(clippy::default_constructed_unit_structs)]
fn syntax() -> SyntaxConfig {
    SyntaxConfig::default()
}

pub(crate) fn ws_config() -> WhitespaceConfig {
    WhitespaceConfig { keep_trailing_newline: false, lstrip_blocks: true, trim_blocks: true }
}

// ---------------------------------------------------------------------------------
// Compiling, with the instruction rewrite

/// Names of the hook functions the rewritten instructions call. A template cannot name
/// them (they are not identifiers), so it cannot shadow them.
const TICK: &str = "\u{1}tick";
const BUILD: &str = "\u{1}build";
const RAW: &str = "\u{1}raw";
const CONCAT: &str = "\u{1}concat";
const CHECK_ADD: &str = "\u{1}add";
const CHECK_MUL: &str = "\u{1}mul";
const CHECK_SLICE: &str = "\u{1}slice";

/// Compiled, rewritten instructions of a template.
pub(crate) struct Compiled<'s> {
    pub(crate) root: Instructions<'s>,
    pub(crate) blocks: BTreeMap<&'s str, Instructions<'s>>,
}

/// Parses, compiles and rewrites `source` (on the caller's thread: call on a thread
/// with [`STACK`]).
pub(crate) fn compile<'s>(source: &'s str, budget: &Budget) -> Result<Compiled<'s>, Error> {
    prescan(source, &budget.limits).map_err(limit_err)?;
    let ast: ast::Stmt<'s> = minijinja::machinery::parse(source, "<chat template>", syntax(), ws_config())?;
    Fold { b: budget, depth: 0 }.stmt(&ast)?;
    let mut g = minijinja::machinery::CodeGenerator::new("<chat template>", source);
    g.compile_stmt(&ast);
    drop(ast);
    let (root, blocks) = g.finish();
    Ok(Compiled { root: rewrite(&root), blocks: blocks.iter().map(|(k, v)| (*k, rewrite(v))).collect() })
}

/// The instructions inserted before `instr` (which then runs unchanged, or replaced as
/// [`replace`] says).
fn prefix<'s>(instr: &Instruction<'s>) -> Vec<Instruction<'s>> {
    use Instruction as I;
    match instr {
        I::Add => vec![I::CallFunction(CHECK_ADD, Some(2)), I::UnpackList(2)],
        I::Mul => vec![I::CallFunction(CHECK_MUL, Some(2)), I::UnpackList(2)],
        I::Slice => vec![I::CallFunction(CHECK_SLICE, Some(4)), I::UnpackList(4)],
        I::EmitRaw(s) => vec![I::LoadConst(Value::from(s.len())), I::CallFunction(RAW, Some(1)), I::DiscardTop],
        I::BuildList(_) | I::BuildMap(_) => vec![I::CallFunction(BUILD, Some(0)), I::DiscardTop],
        I::Iterate(_)
        | I::PushLoop(_)
        | I::Eq
        | I::Ne
        | I::Lt
        | I::Lte
        | I::Gt
        | I::Gte
        | I::In
        | I::CompareAndPreserve(_)
        | I::UnpackList(_)
        | I::UnpackLists(_)
        | I::CallMethod(..)
        | I::CallObject(_)
        | I::PerformTest(..) => vec![I::CallFunction(TICK, Some(0)), I::DiscardTop],
        _ => Vec::new(),
    }
}

/// (The checks return their arguments as a list in reverse order: `UnpackList` pushes
/// a list reversed, for assignment.)
///
/// `instr` as it runs after its [`prefix`], with jump targets mapped by `map`.
fn replace<'s>(instr: &Instruction<'s>, map: &[u32]) -> Instruction<'s> {
    use Instruction as I;
    let m = |t: &u32| map.get(*t as usize).copied().unwrap_or(*t);
    match instr {
        I::StringConcat => I::CallFunction(CONCAT, Some(2)),
        I::Jump(t) => I::Jump(m(t)),
        I::JumpIfFalse(t) => I::JumpIfFalse(m(t)),
        I::JumpIfFalseOrPop(t) => I::JumpIfFalseOrPop(m(t)),
        I::JumpIfTrueOrPop(t) => I::JumpIfTrueOrPop(m(t)),
        I::Iterate(t) => I::Iterate(m(t)),
        I::BuildMacro(name, t, flags) => I::BuildMacro(name, m(t), *flags),
        other => other.clone(),
    }
}

fn rewrite<'s>(old: &Instructions<'s>) -> Instructions<'s> {
    let n = old.len() as u32;
    let mut map = Vec::with_capacity(n as usize + 1);
    let mut pos = 0u32;
    for i in 0..n {
        map.push(pos);
        pos += old.get(i).map_or(0, |x| prefix(x).len() as u32) + 1;
    }
    map.push(pos);
    let mut new = Instructions::new(old.name(), old.source());
    for i in 0..n {
        let Some(instr) = old.get(i) else { break };
        let (span, line) = (old.get_span(i), old.get_line(i));
        let mut add = |x: Instruction<'s>| match (span, line) {
            (Some(s), _) => new.add_with_span(x, s),
            (None, Some(l)) => new.add_with_line(x, l as u16),
            (None, None) => new.add(x),
        };
        for p in prefix(instr) {
            add(p);
        }
        add(replace(instr, &map));
    }
    new
}

// ---------------------------------------------------------------------------------
// The hooks in the environment

/// Installs the operator hooks, the output formatter, the filter and method wrappers.
pub(crate) fn install(env: &mut Environment<'_>, b: &Arc<Budget>) {
    let bb = b.clone();
    env.add_function(TICK, move || bb.tick().map(|_| Value::UNDEFINED));
    let bb = b.clone();
    env.add_function(BUILD, move || {
        bb.tick()?;
        bb.container().map(|_| Value::UNDEFINED)
    });
    let bb = b.clone();
    env.add_function(RAW, move |n: usize| {
        bb.tick()?;
        bb.charge_total(n).map(|_| Value::UNDEFINED)
    });
    let bb = b.clone();
    env.add_function(CONCAT, move |a: Value, c: Value| -> Result<Value, Error> {
        bb.tick()?;
        let mut w = Capped::new(bb.limits.max_value);
        write!(w, "{a}{c}").map_err(|_| bb.value_err())?;
        bb.charge(w.s.len())?;
        Ok(Value::from(w.s))
    });
    let bb = b.clone();
    env.add_function(CHECK_ADD, move |a: Value, c: Value| -> Result<Value, Error> {
        bb.tick()?;
        if let (Some(x), Some(y)) = (a.as_str(), c.as_str()) {
            bb.charge(x.len().saturating_add(y.len()))?;
        } else if is_list(&a) && is_list(&c) {
            if let (Some(x), Some(y)) = (a.len(), c.len()) {
                let n = x.saturating_add(y);
                bb.check_items(n)?;
                bb.charge(n * ITEM)?;
            }
        }
        Ok(Value::from(vec![c, a]))
    });
    let bb = b.clone();
    env.add_function(CHECK_MUL, move |a: Value, c: Value| -> Result<Value, Error> {
        bb.tick()?;
        // minijinja repeats a sequence lazily (`(0..n).flat_map(..)`): repeating that result
        // again costs n × m steps whatever its length (`[] * 31313 * 31313`, a fuzzer
        // find). A lazy operand of a repetition is made a list first, so every repetition
        // is over a plain list and costs what is checked below.
        let plain = |v: Value, other: &Value| -> Result<Value, Error> {
            if v.kind() != ValueKind::Iterable || other.as_usize().is_none() {
                return Ok(v);
            }
            bb.check_items(v.len().unwrap_or(0))?;
            let items: Vec<Value> = v.try_iter()?.collect();
            bb.charge(items.len().saturating_mul(ITEM))?;
            Ok(Value::from(items))
        };
        let a = plain(a, &c)?;
        let c = plain(c, &a)?;
        for (x, y) in [(&a, &c), (&c, &a)] {
            let Some(n) = y.as_usize() else { continue };
            // an empty value repeated n times still costs n steps (minijinja loops n
            // times): count each repetition as at least one byte / one entry
            if let Some(s) = x.as_str() {
                bb.charge(s.len().max(1).saturating_mul(n))?;
            } else if is_list(x) {
                if let Some(l) = x.len() {
                    bb.check_items(l.max(1).saturating_mul(n))?;
                }
            }
        }
        Ok(Value::from(vec![c, a]))
    });
    let bb = b.clone();
    env.add_function(CHECK_SLICE, move |a: Value, s: Value, e: Value, st: Value| -> Result<Value, Error> {
        bb.tick()?;
        let cost = if a.as_str().is_some() { str_len(&a) } else { a.len().unwrap_or(0).saturating_mul(ITEM) };
        bb.charge(cost)?;
        Ok(Value::from(vec![st, e, s, a]))
    });
    let bb = b.clone();
    env.add_function("range", move |lo: isize, hi: Option<isize>, step: Option<isize>| {
        bb.tick()?;
        minijinja::functions::range(lo, hi, step)
    });
    env.add_function("debug", |_: Rest<Value>| -> Result<Value, Error> {
        Err(Error::new(ErrorKind::InvalidOperation, "debug() is not available in chat templates"))
    });
    let bb = b.clone();
    env.set_formatter(move |out, state, value| {
        bb.tick()?;
        let n = bb.display_len(value, bb.limits.max_value)?;
        bb.charge(n)?;
        minijinja::escape_formatter(out, state, value)
    });
    install_filters(env, b);
    let bb = b.clone();
    env.set_unknown_method_callback(move |state, value, method, args| {
        bb.tick()?;
        check_method(&bb, value, method, args)?;
        let r = minijinja_contrib::pycompat::unknown_method_callback(state, value, method, args)?;
        bb.charge_result(&r)?;
        Ok(r)
    });
}

fn is_list(v: &Value) -> bool {
    matches!(v.kind(), ValueKind::Seq | ValueKind::Iterable)
}

/// The wrapped builtin filters (all of minijinja's, but `tojson`, which chat.rs defines).
fn install_filters(env: &mut Environment<'_>, b: &Arc<Budget>) {
    use minijinja::filters as f;
    let builtins: Vec<(&'static str, Value)> = vec![
        ("safe", Value::from_function(f::safe)),
        ("escape", Value::from_function(f::escape)),
        ("e", Value::from_function(f::escape)),
        ("lower", Value::from_function(f::lower)),
        ("upper", Value::from_function(f::upper)),
        ("title", Value::from_function(f::title)),
        ("capitalize", Value::from_function(f::capitalize)),
        ("replace", Value::from_function(f::replace)),
        ("length", Value::from_function(f::length)),
        ("count", Value::from_function(f::length)),
        ("dictsort", Value::from_function(f::dictsort)),
        ("items", Value::from_function(f::items)),
        ("reverse", Value::from_function(f::reverse)),
        ("trim", Value::from_function(f::trim)),
        ("join", Value::from_function(f::join)),
        ("split", Value::from_function(f::split)),
        ("lines", Value::from_function(f::lines)),
        ("default", Value::from_function(f::default)),
        ("d", Value::from_function(f::default)),
        ("round", Value::from_function(f::round)),
        ("abs", Value::from_function(f::abs)),
        ("int", Value::from_function(f::int)),
        ("float", Value::from_function(f::float)),
        ("attr", Value::from_function(f::attr)),
        ("first", Value::from_function(f::first)),
        ("last", Value::from_function(f::last)),
        ("min", Value::from_function(f::min)),
        ("max", Value::from_function(f::max)),
        ("sort", Value::from_function(f::sort)),
        ("list", Value::from_function(f::list)),
        ("string", Value::from_function(f::string)),
        ("bool", Value::from_function(f::bool)),
        ("batch", Value::from_function(f::batch)),
        ("slice", Value::from_function(f::slice)),
        ("sum", Value::from_function(f::sum)),
        ("indent", Value::from_function(f::indent)),
        ("select", Value::from_function(f::select)),
        ("reject", Value::from_function(f::reject)),
        ("selectattr", Value::from_function(f::selectattr)),
        ("rejectattr", Value::from_function(f::rejectattr)),
        ("map", Value::from_function(f::map)),
        ("groupby", Value::from_function(f::groupby)),
        ("unique", Value::from_function(f::unique)),
        ("chain", Value::from_function(f::chain)),
        ("zip", Value::from_function(f::zip)),
        ("pprint", Value::from_function(f::pprint)),
        ("format", Value::from_function(f::format)),
        ("urlencode", Value::from_function(f::urlencode)),
    ];
    for (name, func) in builtins {
        let bb = b.clone();
        env.add_filter(name, move |state: &State, args: Rest<Value>| -> Result<Value, Error> {
            bb.tick()?;
            check_filter(&bb, name, &args)?;
            let r = func.call(state, &args)?;
            bb.charge_result(&r)?;
            Ok(r)
        });
    }
}

/// A keyword argument of a call, if the last argument is the keyword arguments.
fn kwarg(args: &[Value], key: &str) -> Option<Value> {
    let last = args.last()?;
    if !last.is_kwargs() {
        return None;
    }
    last.get_attr(key).ok().filter(|v| !v.is_undefined())
}

/// Positional argument `i` (keyword arguments excluded).
fn pos(args: &[Value], i: usize) -> Option<&Value> {
    args.get(i).filter(|v| !v.is_kwargs())
}

/// An integer argument as u128 (negative: 0), saturating.
fn int_arg(v: &Value) -> Option<u128> {
    if !v.is_integer() {
        return None;
    }
    let i: i128 = i128::try_from(v.clone()).ok().or_else(|| u128::try_from(v.clone()).ok().map(|_| i128::MAX))?;
    Some(i.max(0) as u128)
}

fn to_usize(n: u128) -> usize {
    usize::try_from(n).unwrap_or(usize::MAX)
}

/// The size checks of a filter, from its arguments, before it runs.
fn check_filter(b: &Budget, name: &str, args: &[Value]) -> Result<(), Error> {
    let Some(v) = args.first() else { return Ok(()) };
    let max = b.limits.max_value;
    // A list or map input (of a lazy repeat, say) must be of a listable size.
    if let Some(n) = v.as_object().and_then(|_| v.len()) {
        b.check_items(n)?;
    }
    match name {
        "indent" => {
            let width = pos(args, 1).cloned().or_else(|| kwarg(args, "width"));
            let w = match width {
                Some(w) if w.as_str().is_some() => str_len(&w),
                Some(w) => to_usize(int_arg(&w).unwrap_or(0)),
                None => 4,
            };
            let len = b.display_len(v, max)?;
            let lines = v.as_str().map_or(1, |s| s.bytes().filter(|&c| c == b'\n').count() + 1);
            b.check_len(w.saturating_mul(lines).saturating_add(len))
        }
        "format" => check_format(b, v, &args[1..]),
        "batch" | "slice" => {
            if let Some(n) = pos(args, 1).and_then(int_arg) {
                b.check_items(to_usize(n))?;
            }
            Ok(())
        }
        "replace" => check_replace(b, v, pos(args, 1), pos(args, 2), pos(args, 3)),
        "join" => check_join(b, v, pos(args, 1)),
        "sum" => {
            let (mut items, mut bytes) = (0usize, 0usize);
            for x in v.try_iter()? {
                if let Some(s) = x.as_str() {
                    bytes = bytes.saturating_add(s.len());
                } else if let Some(n) = x.as_object().and_then(|_| x.len()) {
                    items = items.saturating_add(n);
                }
            }
            b.check_items(items)?;
            b.check_len(bytes)
        }
        "chain" => {
            let mut items = 0usize;
            for x in args.iter().filter(|x| !x.is_kwargs()) {
                items = items.saturating_add(x.len().unwrap_or(0));
            }
            b.check_items(items)
        }
        "split" => check_split(b, v, pos(args, 1), false),
        "lines" => check_split(b, v, None, true),
        "escape" | "e" => b.check_len(b.display_len(v, max)?.saturating_mul(6)),
        "urlencode" => b.check_len(b.display_len(v, max)?.saturating_mul(3)),
        "lower" | "upper" | "title" | "capitalize" => b.check_len(b.display_len(v, max)?.saturating_mul(3)),
        "string" | "safe" | "trim" => b.display_len(v, max).map(|_| ()),
        "pprint" => {
            let mut c = Counter { n: 0, cap: max };
            write!(c, "{v:#?}").map_err(|_| b.value_err())
        }
        _ => Ok(()),
    }
}

/// The size checks of a Python-compat method, before it runs.
fn check_method(b: &Budget, v: &Value, method: &str, args: &[Value]) -> Result<(), Error> {
    let max = b.limits.max_value;
    if let Some(n) = v.as_object().and_then(|_| v.len()) {
        b.check_items(n)?;
    }
    if v.as_str().is_none() {
        return Ok(());
    }
    match method {
        "replace" => check_replace(b, v, pos(args, 0), pos(args, 1), pos(args, 2)),
        "format" => check_format(b, v, args),
        "join" => match args.first() {
            Some(items) => check_join(b, items, Some(v)),
            None => Ok(()),
        },
        "split" => check_split(b, v, pos(args, 0), false),
        "splitlines" => check_split(b, v, None, true),
        "upper" | "lower" | "title" | "capitalize" => b.check_len(b.display_len(v, max)?.saturating_mul(3)),
        _ => Ok(()),
    }
}

/// `printf`-style and `str.format` output bound: the format's text, every number in it
/// (widths and precisions), every argument's text, and (with `*` or nested fields) every
/// integer argument as a width.
fn check_format(b: &Budget, fmt: &Value, args: &[Value]) -> Result<(), Error> {
    let Some(f) = fmt.as_str() else { return Ok(()) };
    let max = b.limits.max_value;
    let mut total = f.len() as u128;
    let mut num: u128 = 0;
    let mut depth = 0usize;
    let mut nested = false;
    for c in f.chars().chain(std::iter::once(' ')) {
        if let Some(d) = c.to_digit(10) {
            num = num.saturating_mul(10).saturating_add(d as u128);
            continue;
        }
        total = total.saturating_add(num);
        num = 0;
        match c {
            '*' => nested = true,
            '{' => {
                depth += 1;
                nested |= depth > 1;
            }
            '}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    for a in args {
        total = total.saturating_add(b.display_len(a, max)? as u128 + 32);
        if nested {
            total = total.saturating_add(int_arg(a).unwrap_or(0));
        }
    }
    b.check_len(to_usize(total))
}

fn text(b: &Budget, v: Option<&Value>) -> Result<String, Error> {
    match v {
        None => Ok(String::new()),
        Some(v) => match v.as_str() {
            Some(s) => Ok(s.to_string()),
            None => {
                let mut w = Capped::new(b.limits.max_value);
                write!(w, "{v}").map_err(|_| b.value_err())?;
                Ok(w.s)
            }
        },
    }
}

fn check_replace(
    b: &Budget,
    v: &Value,
    old: Option<&Value>,
    new: Option<&Value>,
    count: Option<&Value>,
) -> Result<(), Error> {
    let s = text(b, Some(v))?;
    let (old, new) = (text(b, old)?, text(b, new)?);
    if new.len() <= old.len() {
        return Ok(());
    }
    let mut n = if old.is_empty() { s.chars().count() + 1 } else { s.matches(old.as_str()).count() };
    if let Some(c) = count.and_then(|c| c.as_i64()).filter(|&c| c >= 0) {
        n = n.min(c as usize);
    }
    b.check_len(s.len().saturating_add(n.saturating_mul(new.len() - old.len())))
}

fn check_join(b: &Budget, items: &Value, sep: Option<&Value>) -> Result<(), Error> {
    if let Some(n) = items.len() {
        b.check_items(n)?;
    }
    if items.as_str().is_some() {
        return Ok(());
    }
    let sep = text(b, sep)?.len();
    let max = b.limits.max_value;
    let mut total = 0usize;
    for (i, x) in items.try_iter()?.enumerate() {
        if i % 1024 == 0 {
            b.tick()?;
        }
        total = total.saturating_add(b.display_len(&x, max)?).saturating_add(if i > 0 { sep } else { 0 });
        if total > max {
            return Err(b.value_err());
        }
    }
    Ok(())
}

fn check_split(b: &Budget, v: &Value, sep: Option<&Value>, lines: bool) -> Result<(), Error> {
    let Some(s) = v.as_str() else { return Ok(()) };
    let pieces = match sep.and_then(Value::as_str) {
        _ if lines => s.lines().count() + 1,
        Some(p) if !p.is_empty() => s.matches(p).count() + 1,
        _ => s.split_whitespace().count() + 1,
    };
    b.check_items(pieces)
}

// ---------------------------------------------------------------------------------
// Constant folding

/// minijinja's code generator folds constant expressions (`'a' * 100000000`,
/// `2 in [1] * 10**12`) while compiling, with no size checks, and re-folds a constant
/// operand once per enclosing expression. This walk mirrors `Expr::as_const` and checks
/// (and counts, times its nesting depth) every fold before the code generator runs.
struct Fold<'b> {
    b: &'b Budget,
    depth: usize,
}

impl Fold<'_> {
    fn stmts(&mut self, body: &[ast::Stmt<'_>]) -> Result<(), Error> {
        body.iter().try_for_each(|s| self.stmt(s))
    }

    fn stmt(&mut self, s: &ast::Stmt<'_>) -> Result<(), Error> {
        use ast::Stmt as S;
        self.b.tick()?;
        match s {
            S::Template(t) => self.stmts(&t.children),
            S::EmitExpr(e) => self.top(&e.expr),
            S::EmitRaw(_) | S::Continue(_) | S::Break(_) => Ok(()),
            S::ForLoop(f) => {
                self.top(&f.target)?;
                self.top(&f.iter)?;
                if let Some(e) = &f.filter_expr {
                    self.top(e)?;
                }
                self.stmts(&f.body)?;
                self.stmts(&f.else_body)
            }
            S::IfCond(i) => {
                self.top(&i.expr)?;
                self.stmts(&i.true_body)?;
                self.stmts(&i.false_body)
            }
            S::WithBlock(w) => {
                for (a, e) in &w.assignments {
                    self.top(a)?;
                    self.top(e)?;
                }
                self.stmts(&w.body)
            }
            S::Set(x) => {
                self.top(&x.target)?;
                self.top(&x.expr)
            }
            S::SetBlock(x) => {
                self.top(&x.target)?;
                if let Some(e) = &x.filter {
                    self.top(e)?;
                }
                self.stmts(&x.body)
            }
            S::AutoEscape(a) => {
                self.top(&a.enabled)?;
                self.stmts(&a.body)
            }
            S::FilterBlock(f) => {
                self.top(&f.filter)?;
                self.stmts(&f.body)
            }
            S::Block(b) => self.stmts(&b.body),
            S::Import(i) => {
                self.top(&i.expr)?;
                self.top(&i.name)
            }
            S::FromImport(i) => {
                self.top(&i.expr)?;
                for (a, b) in &i.names {
                    self.top(a)?;
                    if let Some(b) = b {
                        self.top(b)?;
                    }
                }
                Ok(())
            }
            S::Extends(e) => self.top(&e.name),
            S::Include(i) => self.top(&i.name),
            S::Macro(m) => self.mac(m),
            S::CallBlock(c) => {
                self.call(&c.call)?;
                self.mac(&c.macro_decl)
            }
            S::Do(d) => self.call(&d.call),
        }
    }

    fn mac(&mut self, m: &ast::Macro<'_>) -> Result<(), Error> {
        for e in m.args.iter().chain(&m.defaults) {
            self.top(e)?;
        }
        self.stmts(&m.body)
    }

    fn call(&mut self, c: &ast::Call<'_>) -> Result<(), Error> {
        self.expr(&c.expr)?;
        self.args(&c.args)
    }

    fn args(&mut self, args: &[ast::CallArg<'_>]) -> Result<(), Error> {
        for a in args {
            match a {
                ast::CallArg::Pos(e)
                | ast::CallArg::Kwarg(_, e)
                | ast::CallArg::PosSplat(e)
                | ast::CallArg::KwargSplat(e) => {
                    self.expr(e)?;
                }
            }
        }
        Ok(())
    }

    fn top(&mut self, e: &ast::Expr<'_>) -> Result<(), Error> {
        self.depth = 0;
        self.expr(e).map(|_| ())
    }

    /// The value `e.as_const()` has (checked), if it is constant.
    fn expr(&mut self, e: &ast::Expr<'_>) -> Result<Option<Value>, Error> {
        self.depth += 1;
        let r = self.expr_inner(e);
        self.depth -= 1;
        r
    }

    fn expr_inner(&mut self, e: &ast::Expr<'_>) -> Result<Option<Value>, Error> {
        use ast::Expr as E;
        let b = self.b;
        let opt = |s: &mut Self, e: &Option<ast::Expr<'_>>| -> Result<(), Error> {
            if let Some(e) = e {
                s.expr(e)?;
            }
            Ok(())
        };
        Ok(match e {
            E::Const(c) => Some(c.value.clone()),
            E::Var(_) => None,
            E::List(l) => {
                let mut all = true;
                for x in &l.items {
                    all &= matches!(x, E::Const(_));
                    self.expr(x)?;
                }
                if all {
                    e.as_const()
                } else {
                    None
                }
            }
            E::Map(m) => {
                let mut all = true;
                for x in m.keys.iter().chain(&m.values) {
                    all &= matches!(x, E::Const(_));
                    self.expr(x)?;
                }
                if all {
                    e.as_const()
                } else {
                    None
                }
            }
            E::UnaryOp(u) => match self.expr(&u.expr)? {
                Some(_) => e.as_const(),
                None => None,
            },
            E::BinOp(o) => {
                let (l, r) = (self.expr(&o.left)?, self.expr(&o.right)?);
                let (Some(l), Some(r)) = (l, r) else { return Ok(None) };
                let bytes = match o.op {
                    ast::BinOpKind::Mul => fold_mul(b, &l, &r)?,
                    ast::BinOpKind::Add | ast::BinOpKind::Concat => {
                        let max = b.limits.max_value;
                        b.display_len(&l, max)?.saturating_add(b.display_len(&r, max)?)
                    }
                    _ => 0,
                };
                b.charge(bytes)?;
                b.charge_total(bytes.saturating_mul(self.depth))?;
                e.as_const()
            }
            E::Compare(c) => {
                let mut all = self.expr(&c.expr)?.is_some();
                for op in &c.ops {
                    all &= self.expr(&op.expr)?.is_some();
                }
                if all {
                    e.as_const()
                } else {
                    None
                }
            }
            E::Slice(s) => {
                self.expr(&s.expr)?;
                opt(self, &s.start)?;
                opt(self, &s.stop)?;
                opt(self, &s.step)?;
                None
            }
            E::IfExpr(i) => {
                self.expr(&i.test_expr)?;
                self.expr(&i.true_expr)?;
                opt(self, &i.false_expr)?;
                None
            }
            E::Filter(f) => {
                opt(self, &f.expr)?;
                self.args(&f.args)?;
                None
            }
            E::Test(t) => {
                self.expr(&t.expr)?;
                self.args(&t.args)?;
                None
            }
            E::GetAttr(g) => {
                self.expr(&g.expr)?;
                None
            }
            E::GetItem(g) => {
                self.expr(&g.expr)?;
                self.expr(&g.subscript_expr)?;
                None
            }
            E::Call(c) => {
                self.call(c)?;
                None
            }
        })
    }
}

/// The bytes of `l * r` (string or list repeat), or the value error.
fn fold_mul(b: &Budget, l: &Value, r: &Value) -> Result<usize, Error> {
    for (x, y) in [(l, r), (r, l)] {
        let Some(n) = y.as_usize() else { continue };
        if x.kind() == ValueKind::Iterable {
            // a constant repetition of a lazy repetition: its cost is not its length (see
            // CHECK_MUL); such a constant has no use in a chat template
            return Err(limit_err(
                "repeating the result of a repetition in a constant expression (use |list first)".into(),
            ));
        }
        if let Some(s) = x.as_str() {
            let bytes = s.len().max(1).saturating_mul(n);
            b.check_len(bytes)?;
            return Ok(bytes);
        } else if is_list(x) {
            if let Some(len) = x.len() {
                let items = len.max(1).saturating_mul(n);
                b.check_items(items)?;
                return Ok(items * ITEM);
            }
        }
    }
    Ok(0)
}
