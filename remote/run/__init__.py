"""Running a job: the supervisor and its watchers, launch, auto-stop, events, power, diagnosis."""
