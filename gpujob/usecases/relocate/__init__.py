"""A job that goes on elsewhere: ``move`` to another host from its newest complete checkpoint, and
``guard``, which moves it when its host stops answering."""
