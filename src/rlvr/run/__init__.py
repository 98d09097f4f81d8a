"""A training run, from config to exit code: `build` makes its parts, `loop` repeats the step,
`state` takes and puts back what a resume needs, `stopping`/`faults`/`interrupts`/`health` end it
on purpose with the last good state saved, `input_checks` refuses bad input before a model
loads, `offline_eval` scores a model the way training does. `errors` holds the exceptions that
end a run and `paths` the run directory's layout; both import nothing else of rlvr.

What it is not: the parts themselves (data, rollout, rewards, learner, algorithm) or the
launchers that start the processes a run needs (`rlvr.launch`).
"""
